#![allow(dead_code)] // each test crate uses part of it
//! A stand-in vLLM server on loopback for tests: serves /v1/models and
//! /v1/chat/completions with configurable models, errors and delays.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};

#[derive(Clone, Debug)]
pub enum Behaviour {
    Ok,
    ServerError,
    Garbage,
    Huge,
    Slow(Duration),
}

#[derive(Debug)]
pub struct Config {
    pub models: Vec<(String, i64)>,
    pub behaviour: Behaviour,
    pub tool_calling: bool,
}

struct Shared {
    config: Config,
    requests: AtomicUsize,
    /// The /v1/models answer, built once (a list of thousands stays cheap to serve).
    models_body: String,
}

pub struct StandIn {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl StandIn {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

async fn models(State(s): State<Arc<Shared>>) -> axum::response::Response {
    s.requests.fetch_add(1, Ordering::SeqCst);
    match &s.config.behaviour {
        Behaviour::ServerError => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
        Behaviour::Garbage => (StatusCode::OK, "<html>not json").into_response(),
        Behaviour::Huge => (StatusCode::OK, "x".repeat(10 * 1024 * 1024)).into_response(),
        Behaviour::Slow(d) => {
            tokio::time::sleep(*d).await;
            (StatusCode::OK, "{\"data\":[]}").into_response()
        }
        Behaviour::Ok => {
            ([(axum::http::header::CONTENT_TYPE, "application/json")], s.models_body.clone()).into_response()
        }
    }
}

async fn chat(State(s): State<Arc<Shared>>) -> axum::response::Response {
    s.requests.fetch_add(1, Ordering::SeqCst);
    if s.config.tool_calling {
        axum::Json(serde_json::json!({"choices": [{"message": {"role": "assistant", "content": "p"}}]})).into_response()
    } else {
        let err = serde_json::json!({"object": "error", "message": "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set", "code": 400});
        (StatusCode::BAD_REQUEST, axum::Json(err)).into_response()
    }
}

/// Starts a stand-in on 127.0.0.1 (random port) for the life of the runtime.
pub async fn start(config: Config) -> StandIn {
    let data: Vec<serde_json::Value> = config
        .models
        .iter()
        .map(|(id, len)| serde_json::json!({"id": id, "object": "model", "max_model_len": len}))
        .collect();
    let models_body = serde_json::json!({"object": "list", "data": data}).to_string();
    let shared = Arc::new(Shared { config, requests: AtomicUsize::new(0), models_body });
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind stand-in");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    StandIn { addr, shared }
}
