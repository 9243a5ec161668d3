//! The HTTP endpoints of a node: `GET /healthz` and `GET /metrics`.
//!
//! HTTP is control plane, so it runs on tokio + axum; the MQTT data plane runs on the broker's
//! own event-loop threads and is reached only through `BrokerHandle`.

use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ballast_broker::{BrokerHandle, MetricsSnapshot};
use prometheus_client::registry::Registry;

use crate::prom;

/// The running broker, shared by the HTTP handlers and the shutdown path. Shutdown takes the
/// handle out, after which the endpoints answer 503.
#[derive(Default)]
pub struct BrokerSlot(Mutex<Option<BrokerHandle>>);

impl BrokerSlot {
    pub fn new(handle: BrokerHandle) -> BrokerSlot {
        BrokerSlot(Mutex::new(Some(handle)))
    }

    pub fn snapshot(&self) -> Option<MetricsSnapshot> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|h| h.metrics())
    }

    pub fn take(&self) -> Option<BrokerHandle> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

#[derive(Clone)]
struct AppState {
    broker: Arc<BrokerSlot>,
    registry: Arc<Registry>,
}

pub fn router(broker: Arc<BrokerSlot>) -> Router {
    let source = broker.clone();
    let registry = prom::registry(Arc::new(move || source.snapshot()));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(AppState {
            broker,
            registry: Arc::new(registry),
        })
}

async fn healthz(State(state): State<AppState>) -> Response {
    match state.broker.snapshot() {
        Some(m) => Json(serde_json::json!({ "status": "ok", "connections": m.connections }))
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "status": "shutting_down" })),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    match prom::encode(&state.registry) {
        Ok(body) => ([(header::CONTENT_TYPE, prom::CONTENT_TYPE)], body).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

async fn not_found(uri: Uri) -> (StatusCode, String) {
    (
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {}\navailable: GET /healthz, GET /metrics\n",
            uri.path()
        ),
    )
}
