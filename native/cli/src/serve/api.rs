//! OpenAI's request and response shapes: what `lutra serve` reads and writes.
//! Unknown fields are ignored, as OpenAI does; fields lutra cannot honour yet are
//! refused with a 400 rather than silently ignored.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use lutra::core::json::{JsonConstraint, Schema};

use crate::json_schema::schema_from_json;
use lutra::SamplerConfig;
use serde::Deserialize;
use serde_json::{json, Value};

use super::slots::Summary;

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `code` where it has one (`context_length_exceeded`, `invalid_api_key`).
    pub code: Option<&'static str>,
    pub param: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), code: None, param: None }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn param(mut self, param: &'static str) -> ApiError {
        self.param = Some(param);
        self
    }

    pub fn code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The error object (also what a stream sends when a generation fails midway).
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind(), "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The sampling and length fields shared by both endpoints.
#[derive(Deserialize, Default)]
pub struct Params {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub repeat_last_n: Option<i64>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<Stop>,
    pub n: Option<i64>,
    pub response_format: Option<Value>,
    pub logprobs: Option<Value>,
    pub tools: Option<Value>,
}

#[derive(Deserialize, Default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
}

#[derive(Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
}

/// A completion prompt: text, one text in a list, or token ids (as llama-server takes).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

/// Parses a request body (an endpoint's own fields, or the shared [`Params`] from the
/// same body), the 400 naming the field, line and column.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(body)).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        match field.as_str() {
            "." => ApiError::bad_request(format!("invalid request body: {inner}")),
            _ => ApiError::bad_request(format!("invalid request body: '{field}': {inner}")),
        }
    })
}

/// What a request asks of the engine besides its prompt.
pub struct Settings {
    pub sampler: SamplerConfig,
    /// `None`: until the end token or the end of the context.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// `response_format`: the text must be one JSON document of this schema.
    pub json: Option<JsonConstraint>,
    pub stream: bool,
    pub include_usage: bool,
}

/// Checks the shared fields; what lutra cannot honour is refused by name.
pub fn settings(p: &Params) -> Result<Settings, ApiError> {
    let refuse = |param: &'static str, why: &str| Err(ApiError::bad_request(format!("'{param}': {why}")).param(param));
    if p.n.is_some_and(|n| n != 1) {
        return refuse("n", "lutra serve generates one choice per request (n = 1)");
    }
    let json = match &p.response_format {
        None => None,
        Some(format) => {
            response_format(format).map_err(|e| ApiError::bad_request(format!("'response_format': {e}")).param("response_format"))?
        }
    };
    if p.frequency_penalty.is_some_and(|x| x != 0.0) || p.presence_penalty.is_some_and(|x| x != 0.0) {
        return refuse("frequency_penalty", "additive penalties are not supported; use repeat_penalty (llama.cpp's multiplicative one)");
    }
    if p.logprobs.as_ref().is_some_and(|l| l != &Value::Bool(false) && !l.is_null()) {
        return refuse("logprobs", "log probabilities are not reported yet");
    }
    if p.tools.as_ref().is_some_and(|t| t.as_array().is_none_or(|a| !a.is_empty())) {
        return refuse("tools", "tool calls are not supported");
    }
    let max_tokens = match p.max_completion_tokens.or(p.max_tokens) {
        None | Some(-1) => None,
        Some(n) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => return refuse("max_tokens", &format!("{n} is below the minimum of 1")),
    };
    let defaults = SamplerConfig::default();
    let finite = |param: &'static str, x: Option<f32>, lo: f32, hi: f32, default: f32| match x {
        None => Ok(default),
        Some(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(x),
        Some(x) => Err(ApiError::bad_request(format!("'{param}': {x} is outside {lo}..={hi}")).param(param)),
    };
    let count = |param: &'static str, x: Option<i64>, default: usize| match x {
        None => Ok(default),
        Some(x) if x >= 0 => Ok(usize::try_from(x).unwrap_or(usize::MAX)),
        Some(x) => Err(ApiError::bad_request(format!("'{param}': {x} is negative")).param(param)),
    };
    let sampler = SamplerConfig {
        temperature: finite("temperature", p.temperature, 0.0, 2.0, defaults.temperature)?,
        top_k: count("top_k", p.top_k, defaults.top_k)?,
        top_p: finite("top_p", p.top_p, 0.0, 1.0, defaults.top_p)?,
        min_p: finite("min_p", p.min_p, 0.0, 1.0, defaults.min_p)?,
        repeat_penalty: finite("repeat_penalty", p.repeat_penalty, 0.0, 10.0, defaults.repeat_penalty)?,
        repeat_last_n: count("repeat_last_n", p.repeat_last_n, defaults.repeat_last_n)?,
        seed: p.seed.unwrap_or_else(clock_seed),
    };
    let stop = match &p.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) if v.len() <= 16 => v.clone(),
        Some(Stop::Many(v)) => return refuse("stop", &format!("{} stop strings; at most 16", v.len())),
    };
    if stop.iter().any(|s| s.len() > 1024) {
        return refuse("stop", "a stop string is longer than 1024 bytes");
    }
    Ok(Settings {
        sampler,
        max_tokens,
        stop,
        json,
        stream: p.stream.unwrap_or(false),
        include_usage: p.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
    })
}

/// `{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "json_schema":
/// {"schema": {...}}}` as OpenAI takes them.
fn response_format(format: &Value) -> Result<Option<JsonConstraint>, String> {
    let schema = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => Schema::AnyObject,
        Some("json_schema") => {
            let schema =
                format.get("json_schema").and_then(|s| s.get("schema")).ok_or("json_schema needs a 'json_schema': {'schema': {...}}")?;
            schema_from_json(schema, 0)?
        }
        Some(other) => return Err(format!("type '{other}' is not one of text, json_object, json_schema")),
        None => return Err("no 'type'".into()),
    };
    JsonConstraint::new(&schema).map(Some).map_err(|e| e.to_string())
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// `usage`, with the prompt tokens the slot already held under OpenAI's
/// `prompt_tokens_details.cached_tokens`.
pub fn usage(s: &Summary) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
    })
}

/// llama-server's `timings`: `prompt_n` counts only the prompt tokens computed.
pub fn timings(s: &Summary) -> Value {
    let prompt_n = s.prompt_tokens - s.cached_tokens;
    let per = |ms: f64, n: usize| if n == 0 { 0.0 } else { ms / n as f64 };
    let rate = |ms: f64, n: usize| if ms <= 0.0 { 0.0 } else { n as f64 * 1e3 / ms };
    json!({
        "cache_n": s.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": s.prompt_ms,
        "prompt_per_token_ms": per(s.prompt_ms, prompt_n),
        "prompt_per_second": rate(s.prompt_ms, prompt_n),
        "predicted_n": s.completion_tokens,
        "predicted_ms": s.predicted_ms,
        "predicted_per_token_ms": per(s.predicted_ms, s.completion_tokens),
        "predicted_per_second": rate(s.predicted_ms, s.completion_tokens),
    })
}
