//! The topic index: a trie over topic levels mapping filters to subscribers.
//!
//! Filters are stored level by level; `+` and `#` are children like any other level and are
//! followed during a lookup alongside the literal level. Shared subscriptions
//! (`$share/group/filter`) are stored under their filter with the group name, and a lookup
//! reports each matching group once so the caller can pick one member.
//!
//! The index is generic over what a subscriber is (`T`) so it can be tested alone; subscribers
//! are told apart by a `u64` id (one per session).

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use ballast_codec::SubOptions;

/// One subscription of one subscriber.
#[derive(Debug, Clone)]
pub struct Subscriber<T> {
    pub id: u64,
    pub target: T,
    pub options: SubOptions,
    pub subscription_id: Option<u32>,
}

/// The members of one shared subscription group on one filter.
#[derive(Debug)]
pub struct SharedGroup<T> {
    pub name: Box<str>,
    /// The whole filter as subscribed: `$share/{name}/{filter}`.
    pub key: Arc<str>,
    pub members: Vec<Subscriber<T>>,
    /// Round-robin cursor; advanced by lookups under a shared read lock, hence atomic.
    pub cursor: AtomicUsize,
}

/// What a lookup yields: a plain subscription or a shared group to pick a member from.
pub enum Match<'a, T> {
    Direct(&'a Subscriber<T>),
    Shared(&'a SharedGroup<T>),
}

#[derive(Debug)]
struct Node<T> {
    children: HashMap<Box<str>, Node<T>>,
    subscribers: Vec<Subscriber<T>>,
    shared: Vec<SharedGroup<T>>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node {
            children: HashMap::new(),
            subscribers: Vec::new(),
            shared: Vec::new(),
        }
    }
}

impl<T> Node<T> {
    fn is_empty(&self) -> bool {
        self.children.is_empty() && self.subscribers.is_empty() && self.shared.is_empty()
    }
}

#[derive(Debug)]
pub struct TopicIndex<T> {
    root: Node<T>,
    len: usize,
}

impl<T> Default for TopicIndex<T> {
    fn default() -> Self {
        TopicIndex {
            root: Node::default(),
            len: 0,
        }
    }
}

impl<T> TopicIndex<T> {
    /// Number of subscriptions held (each shared group member counts once).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds or replaces the subscription of `sub.id` to `filter` (shared when `group` is set).
    /// Returns true when it is new, false when it replaced an existing one.
    pub fn insert(&mut self, filter: &str, group: Option<&str>, sub: Subscriber<T>) -> bool {
        let mut node = &mut self.root;
        for level in filter.split('/') {
            node = node.children.entry(level.into()).or_default();
        }
        let list = match group {
            None => &mut node.subscribers,
            Some(g) => {
                let i = match node.shared.iter().position(|s| &*s.name == g) {
                    Some(i) => i,
                    None => {
                        node.shared.push(SharedGroup {
                            name: g.into(),
                            key: format!("$share/{g}/{filter}").into(),
                            members: Vec::new(),
                            cursor: AtomicUsize::new(0),
                        });
                        node.shared.len() - 1
                    }
                };
                &mut node.shared[i].members
            }
        };
        match list.iter_mut().find(|s| s.id == sub.id) {
            Some(existing) => {
                *existing = sub;
                false
            }
            None => {
                list.push(sub);
                self.len += 1;
                true
            }
        }
    }

    /// Removes the subscription of `id` to `filter`; returns whether there was one.
    pub fn remove(&mut self, filter: &str, group: Option<&str>, id: u64) -> bool {
        let levels: Vec<&str> = filter.split('/').collect();
        let removed = Self::remove_at(&mut self.root, &levels, group, id);
        if removed {
            self.len -= 1;
        }
        removed
    }

    fn remove_at(node: &mut Node<T>, levels: &[&str], group: Option<&str>, id: u64) -> bool {
        let Some((first, rest)) = levels.split_first() else {
            return match group {
                None => {
                    let before = node.subscribers.len();
                    node.subscribers.retain(|s| s.id != id);
                    before != node.subscribers.len()
                }
                Some(g) => {
                    let Some(i) = node.shared.iter().position(|s| &*s.name == g) else {
                        return false;
                    };
                    let members = &mut node.shared[i].members;
                    let before = members.len();
                    members.retain(|s| s.id != id);
                    let removed = before != members.len();
                    if members.is_empty() {
                        node.shared.swap_remove(i);
                    }
                    removed
                }
            };
        };
        let Some(child) = node.children.get_mut(*first) else {
            return false;
        };
        let removed = Self::remove_at(child, rest, group, id);
        if child.is_empty() {
            node.children.remove(*first);
        }
        removed
    }

    /// The shared group `group` on exactly `filter`, if it has members.
    pub fn shared_group(&self, filter: &str, group: &str) -> Option<&SharedGroup<T>> {
        let mut node = &self.root;
        for level in filter.split('/') {
            node = node.children.get(level)?;
        }
        node.shared.iter().find(|g| &*g.name == group)
    }

    /// Calls `f` for every subscription whose filter matches `topic`.
    ///
    /// A topic starting with `$` is not matched by a filter starting with a wildcard
    /// [MQTT-4.7.2-1].
    pub fn for_each_match<'a>(&'a self, topic: &str, mut f: impl FnMut(Match<'a, T>)) {
        let dollar = topic.starts_with('$');
        let mut levels = topic.split('/');
        Self::walk(&self.root, &mut levels, dollar, &mut f);
    }

    fn walk<'a, 'b>(
        node: &'a Node<T>,
        levels: &mut (impl Iterator<Item = &'b str> + Clone),
        first_is_dollar: bool,
        f: &mut impl FnMut(Match<'a, T>),
    ) {
        match levels.next() {
            None => {
                Self::emit(node, f);
                // "a/#" also matches "a" [MQTT-4.7.1-2].
                if let Some(hash) = node.children.get("#") {
                    Self::emit(hash, f);
                }
            }
            Some(level) => {
                if !first_is_dollar {
                    if let Some(hash) = node.children.get("#") {
                        Self::emit(hash, f);
                    }
                    if let Some(plus) = node.children.get("+") {
                        Self::walk(plus, &mut levels.clone(), false, f);
                    }
                }
                if let Some(child) = node.children.get(level) {
                    Self::walk(child, levels, false, f);
                }
            }
        }
    }

    fn emit<'a>(node: &'a Node<T>, f: &mut impl FnMut(Match<'a, T>)) {
        for s in &node.subscribers {
            f(Match::Direct(s));
        }
        for g in &node.shared {
            f(Match::Shared(g));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(id: u64) -> Subscriber<()> {
        Subscriber {
            id,
            target: (),
            options: SubOptions::default(),
            subscription_id: None,
        }
    }

    fn ids(index: &TopicIndex<()>, topic: &str) -> Vec<u64> {
        let mut v = Vec::new();
        index.for_each_match(topic, |m| match m {
            Match::Direct(s) => v.push(s.id),
            Match::Shared(g) => v.extend(g.members.iter().map(|s| 1000 + s.id)),
        });
        v.sort();
        v
    }

    #[test]
    fn literal_and_wildcards() {
        let mut i = TopicIndex::default();
        i.insert("a/b/c", None, sub(1));
        i.insert("a/+/c", None, sub(2));
        i.insert("a/#", None, sub(3));
        i.insert("#", None, sub(4));
        i.insert("+/+", None, sub(5));
        i.insert("a/b", None, sub(6));
        assert_eq!(ids(&i, "a/b/c"), vec![1, 2, 3, 4]);
        assert_eq!(ids(&i, "a/b"), vec![3, 4, 5, 6]);
        assert_eq!(ids(&i, "a"), vec![3, 4]);
        assert_eq!(ids(&i, "x/y"), vec![4, 5]);
        assert_eq!(ids(&i, "a/x/c/d"), vec![3, 4]);
    }

    #[test]
    fn hash_matches_parent_level() {
        let mut i = TopicIndex::default();
        i.insert("sport/#", None, sub(1));
        assert_eq!(ids(&i, "sport"), vec![1]);
        assert_eq!(ids(&i, "sport/"), vec![1]);
        assert_eq!(ids(&i, "sports"), Vec::<u64>::new());
    }

    #[test]
    fn empty_levels_are_levels() {
        let mut i = TopicIndex::default();
        i.insert("/+", None, sub(1));
        i.insert("+/+", None, sub(2));
        i.insert("a//b", None, sub(3));
        assert_eq!(ids(&i, "/x"), vec![1, 2]);
        assert_eq!(ids(&i, "a//b"), vec![3]);
    }

    #[test]
    fn dollar_topics_need_explicit_first_level() {
        let mut i = TopicIndex::default();
        i.insert("#", None, sub(1));
        i.insert("+/broker/uptime", None, sub(2));
        i.insert("$SYS/#", None, sub(3));
        i.insert("$SYS/+/uptime", None, sub(4));
        assert_eq!(ids(&i, "$SYS/broker/uptime"), vec![3, 4]);
        assert_eq!(ids(&i, "x/broker/uptime"), vec![1, 2]);
    }

    #[test]
    fn replace_and_remove() {
        let mut i = TopicIndex::default();
        assert!(i.insert("a/b", None, sub(1)));
        assert!(!i.insert("a/b", None, sub(1)));
        assert_eq!(i.len(), 1);
        assert!(i.insert("a/+", None, sub(1)));
        assert!(i.remove("a/b", None, 1));
        assert!(!i.remove("a/b", None, 1));
        assert_eq!(ids(&i, "a/b"), vec![1]);
        assert!(i.remove("a/+", None, 1));
        assert!(i.is_empty());
        assert!(i.root.is_empty(), "empty nodes are pruned");
    }

    #[test]
    fn shared_groups_are_reported_once() {
        let mut i = TopicIndex::default();
        i.insert("t/+", Some("g"), sub(1));
        i.insert("t/+", Some("g"), sub(2));
        i.insert("t/+", Some("h"), sub(3));
        i.insert("t/+", None, sub(4));
        let mut groups = 0;
        i.for_each_match("t/x", |m| {
            if let Match::Shared(_) = m {
                groups += 1
            }
        });
        assert_eq!(groups, 2);
        assert_eq!(ids(&i, "t/x"), vec![4, 1001, 1002, 1003]);
        assert!(i.remove("t/+", Some("g"), 1));
        assert!(i.remove("t/+", Some("g"), 2));
        assert_eq!(ids(&i, "t/x"), vec![4, 1003]);
    }
}
