//! Shared logic of the example services: configuration from the
//! environment, the application state wiring every `ate` primitive, a
//! simulated provider, metrics, and the framework-neutral request handlers
//! that the Axum and Actix adapters call.
//!
//! Both binaries (`axum-service`, `actix-service`) expose the same API:
//!
//! | route | what it shows |
//! |---|---|
//! | `GET /health`, `GET /ready` | liveness vs readiness (`ate-readiness`) |
//! | `POST /__internal/drain` | drain trigger: the process's secret, from loopback only |
//! | `GET /ready/capabilities` | readiness per capability (`prompt-bridge`, `client-notifications`) |
//! | `GET /work?ms=N` | in-flight work counted by the gate |
//! | `GET /ws` | WebSocket echo; accept-then-close 1001 while draining |
//! | `POST /notify`, `POST /prompt` | per-caller limits + a shared bucket (`ate-ratelimit`) |
//! | `PUT/GET /objects/{name}`, `POST /objects/{name}/observed` | generation latch (`ate-generation`) |
//! | `POST /invoke` | idempotent provider call (`ate-ledger`) |
//! | `GET /metrics` | Prometheus text exposition |
// Not a library anyone depends on: its errors are documented where
// it serves them, not per function.
#![allow(clippy::missing_errors_doc)]

pub mod actix_app;
pub mod audit;
pub mod axum_app;
pub mod cli;
pub mod config;
pub mod json;
pub mod metrics;
pub mod objects;
pub mod provider;
pub mod service;

pub use config::Config;
pub use service::{ApiResponse, AppState};
