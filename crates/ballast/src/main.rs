//! `ballast`: the one binary of Ballast.
//!
//! Each part of the system is a subcommand. Today there is `serve` (one broker node); the load
//! balancer and the benchmark tools will join it as `ballast lb` and `ballast bench`. This crate
//! only wires the library crates together: it parses the command line and the config file,
//! sets up logging, and runs the HTTP endpoints next to the broker.

mod cli;
mod config;
mod http;
mod prom;
mod serve;
mod sys;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc holds an idle connection's allocations in less memory than the system allocator
/// (0.76 KiB against 1.0 KiB per connection in the measurement in DESIGN.md) and is faster on
/// the publish path's small allocations.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Serve(args) => serve::run(args),
        cli::Command::Bench { scenario } => match ballast_bench::run(scenario) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench failed: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
