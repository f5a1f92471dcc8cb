//! `lutra serve` over real sockets: a raw HTTP/1.1 client (no code shared with the
//! server), stories15M (fetched by `cargo xtask models`) and Gemma 3 270M where a
//! generation must last long enough to be interrupted. The greedy text is checked
//! against `lutra run`'s; the bad requests against OpenAI's error shapes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn model(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models").join(name);
    assert!(p.exists(), "{} missing: run `cargo xtask models all` first", p.display());
    p
}

/// A running `lutra serve`, killed when dropped; its log collected for assertions.
struct Server {
    child: Child,
    address: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(model_path: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lutra"))
            .env("LUTRA_IMPORT_CACHE", "off")
            .env_remove("LUTRA_API_KEY")
            .args(["serve", "-m", model_path, "--port", "0", "-t", "1"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lutra serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let mut line = String::new();
        let address = loop {
            line.clear();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!("lutra serve exited ({status}) before listening: {}", log.lock().unwrap());
            }
            log.lock().unwrap().push_str(&line);
            if let Some(a) = line.trim().strip_prefix("listening on http://") {
                break a.parse().unwrap();
            }
        };
        // the server writes a line per request: keep its pipe drained
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Server { child, address, log }
    }

    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        let mut s = TcpStream::connect(self.address).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut head =
            format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n", self.address, body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        read_response(s)
    }

    fn post(&self, path: &str, body: &Value) -> Response {
        self.request("POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes())
    }

    fn health(&self) -> Value {
        let r = self.request("GET", "/health", &[], b"");
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Response {
    status: u16,
    headers: String,
    body: String,
}

impl Response {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `data:` payloads of a server-sent event stream.
    fn events(&self) -> Vec<String> {
        self.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
    }

    /// OpenAI's error shape, and its message.
    fn error(&self, status: u16) -> String {
        assert_eq!(self.status, status, "{}", self.body);
        let v = self.json();
        let e = &v["error"];
        assert!(e["message"].is_string() && e["type"].is_string(), "{v}");
        e["message"].as_str().unwrap().to_string()
    }
}

fn read_response(mut s: TcpStream) -> Response {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head: {raw:?}"));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    let body = if chunked { unchunk(body) } else { body.to_string() };
    Response { status, headers: head.to_string(), body }
}

fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
}

fn stories() -> String {
    model("stories15M/stories15M-q8_0.gguf").to_str().unwrap().to_string()
}

#[test]
fn greedy_completion_equals_lutra_run_and_streams_the_same_text() {
    let server = Server::start(&stories(), &["--parallel", "2"]);
    let prompt = "Once upon a time";
    let r = server.post("/v1/completions", &json!({"model": "stories15M-q8_0", "prompt": prompt, "max_tokens": 40, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let text = v["choices"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 40);
    assert_eq!(v["usage"]["prompt_tokens"], 5, "BOS and four tokens: {v}");

    let run = Command::new(env!("CARGO_BIN_EXE_lutra"))
        .env("LUTRA_IMPORT_CACHE", "off")
        .args(["run", "-m", &stories(), "-p", prompt, "-n", "40", "--temp", "0", "-t", "1"])
        .output()
        .unwrap();
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim_end(), format!("{prompt}{text}"));

    let streamed = server.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 40, "temperature": 0, "stream": true}));
    assert_eq!(streamed.status, 200);
    assert!(streamed.headers.to_ascii_lowercase().contains("content-type: text/event-stream"), "{}", streamed.headers);
    let events = streamed.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let joined: String = chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(joined, text);
    assert!(chunks.len() > 10, "streamed in pieces: {}", chunks.len());
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
    // the same prompt again: every prompt token but the last came from the slot's cache
    assert_eq!(chunks.last().unwrap()["timings"]["cache_n"], 4);
}

/// Requests generating at once share each step's pass over the weights; their greedy
/// text is the text each gets alone.
#[test]
fn concurrent_requests_get_the_text_each_gets_alone() {
    let server = Arc::new(Server::start(&stories(), &["--parallel", "4"]));
    let prompts = ["Once upon a time", "The otter swam", "Tom had a red ball", "In a small town there was"];
    let body = |p: &str| json!({"prompt": p, "max_tokens": 48, "temperature": 0});
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| server.post("/v1/completions", &body(p)).json()["choices"][0]["text"].as_str().unwrap().to_string())
        .collect();
    for round in 0..3 {
        let together: Vec<_> = prompts
            .iter()
            .map(|&p| {
                let (server, body) = (server.clone(), body(p));
                std::thread::spawn(move || server.post("/v1/completions", &body).json()["choices"][0]["text"].as_str().unwrap().to_string())
            })
            .collect();
        for (i, t) in together.into_iter().enumerate() {
            assert_eq!(t.join().unwrap(), alone[i], "round {round}, prompt {:?}", prompts[i]);
        }
    }
}

/// `response_format` constrains the text: a JSON object (any keys), and a schema's
/// object with its required keys and types, both parsed by serde_json.
#[test]
fn response_format_gives_json_that_parses() {
    let server = Server::start(&stories(), &[]);
    let schema =
        json!({"type": "object", "properties": {"name": {"type": "string"}, "big": {"type": "boolean"}}, "required": ["name", "big"]});
    for (format, seed) in
        [(json!({"type": "json_object"}), 1), (json!({"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}), 2)]
    {
        let r = server
            .post("/v1/completions", &json!({"prompt": "Once upon a time", "max_tokens": 120, "seed": seed, "response_format": format}));
        let v = r.json();
        let text = v["choices"][0]["text"].as_str().unwrap();
        if v["choices"][0]["finish_reason"] == "stop" {
            let doc: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
            assert!(doc.is_object(), "{doc}");
            if format["type"] == "json_schema" {
                assert!(doc["name"].is_string() && doc["big"].is_boolean(), "{doc}");
            }
        } else {
            assert!(text.trim_start().starts_with('{'), "{text:?}");
        }
    }
}

#[test]
fn chat_streams_deltas_and_a_second_turn_computes_only_its_new_tokens() {
    let server = Server::start(&stories(), &["--chat-template", "chatml", "--ctx", "128"]);
    let first = json!([{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "A cat"}]);
    let r = server.post("/v1/chat/completions", &json!({"messages": first, "max_tokens": 12, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    let answer = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let prompt1 = v["usage"]["prompt_tokens"].as_u64().unwrap();

    let mut second = first.as_array().unwrap().clone();
    second.push(json!({"role": "assistant", "content": answer}));
    second.push(json!({"role": "user", "content": [{"type": "text", "text": "A dog"}]}));
    let r = server.post(
        "/v1/chat/completions",
        &json!({"messages": second, "max_tokens": 8, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let events = r.events();
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let usage = &chunks.last().unwrap()["usage"];
    let timings = &chunks[chunks.len() - 2]["timings"];
    let (prompt2, cached) = (usage["prompt_tokens"].as_u64().unwrap(), usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap());
    // the first turn's prompt and answer were kept: only the new turn was computed
    assert!(cached > prompt1, "{cached} cached of {prompt2}; the first prompt had {prompt1}");
    assert_eq!(timings["prompt_n"].as_u64().unwrap(), prompt2 - cached);
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_stays_up() {
    let server = Server::start(&stories(), &["--max-body", "65536"]);
    let post = |body: &str| server.request("POST", "/v1/completions", &[("Content-Type", "application/json")], body.as_bytes());
    assert!(post("{\"prompt\": \"Once\",").error(400).contains("invalid request body"));
    assert!(post("{\"prompt\": \"Once\", \"max_tokens\": \"ten\"}").error(400).contains("max_tokens"));
    assert!(post("{\"prompt\": \"Once\", \"max_tokens\": 0}").error(400).contains("max_tokens"));
    assert!(post("{\"prompt\": \"Once\", \"temperature\": -1}").error(400).contains("temperature"));
    assert!(post("{\"prompt\": \"Once\", \"model\": \"gpt-4o\"}").error(404).contains("gpt-4o"));
    let pattern = json!({"prompt": "Once", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "^a"}}}});
    assert!(server.post("/v1/completions", &pattern).error(400).contains("'pattern' is not supported"));
    assert!(post("{\"prompt\": \"Once\", \"response_format\": {\"type\": \"yaml\"}}").error(400).contains("response_format"));
    assert!(post("{\"prompt\": [1, 99999]}").error(400).contains("99999"));
    // unknown fields are ignored, as OpenAI does
    let ok = post("{\"prompt\": \"Once\", \"max_tokens\": 3, \"frobnicate\": {\"x\": 1}, \"user\": \"u1\"}");
    assert_eq!(ok.status, 200, "{}", ok.body);
    // max_tokens beyond the context: the context (128 positions) ends it
    let long = post("{\"prompt\": \"Once\", \"max_tokens\": 1000000000, \"temperature\": 0}").json();
    assert_eq!(long["choices"][0]["finish_reason"], "length", "{long}");
    assert!(long["usage"]["total_tokens"].as_u64().unwrap() <= 128, "{long}");
    let over = "Once upon a time there was a cat. ".repeat(20);
    let r = server.post("/v1/completions", &json!({"prompt": over}));
    assert!(r.error(400).contains("context"));
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    // a body over --max-body, declared and undeclared (chunked)
    let mut s = TcpStream::connect(server.address).unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n{").unwrap();
    assert!(read_response(s).error(413).contains("--max-body"));
    let mut s = TcpStream::connect(server.address).unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    for _ in 0..4 {
        let _ = s.write_all(format!("{:x}\r\n{}\r\n", 30_000, " ".repeat(30_000)).as_bytes());
    }
    let _ = s.write_all(b"0\r\n\r\n");
    assert_eq!(read_response(s).status, 413);
    assert_eq!(server.request("GET", "/v1/nothing", &[], b"").error(404), "no route GET /v1/nothing");
    assert_eq!(server.health()["status"], "ok");
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("POST /v1/completions 413") && !log.contains("panicked"), "{log}");
}

#[test]
fn a_100_mb_body_is_refused_before_it_is_read() {
    let server = Server::start(&stories(), &[]);
    let mut s = TcpStream::connect(server.address).unwrap();
    // the head and the body's first bytes only: the answer must not wait for the rest (and
    // a server that closes with unread bytes resets the connection before they are read)
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n{\"messages\": [").unwrap();
    let t = Instant::now();
    let r = read_response(s);
    assert!(r.error(413).contains("bytes"));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(server.health()["status"], "ok");
}

#[test]
fn the_api_key_is_required_where_set() {
    let server = Server::start(&stories(), &["--api-key", "sesame"]);
    let body = json!({"prompt": "Once", "max_tokens": 2}).to_string();
    let without = server.request("POST", "/v1/completions", &[], body.as_bytes());
    assert!(without.error(401).contains("no API key"));
    let wrong = server.request("POST", "/v1/completions", &[("Authorization", "Bearer open")], body.as_bytes());
    assert_eq!(wrong.error(401), "invalid API key");
    assert_eq!(wrong.json()["error"]["code"], "invalid_api_key");
    assert_eq!(server.request("GET", "/v1/models", &[], b"").status, 401);
    let right = server.request("POST", "/v1/completions", &[("Authorization", "Bearer sesame")], body.as_bytes());
    assert_eq!(right.status, 200, "{}", right.body);
    let models = server.request("GET", "/v1/models", &[("Authorization", "Bearer sesame")], b"").json();
    assert_eq!(models["data"][0]["id"], "stories15M-q8_0");
    // a load balancer's health check needs no key
    assert_eq!(server.health()["status"], "ok");
}

/// Starts a streamed completion of up to `tokens` tokens and returns once its first
/// piece has arrived (so it holds a slot, not a place in the queue).
fn stream_in_background(server: &Server, tokens: usize) -> BufReader<TcpStream> {
    let body = json!({"prompt": "The history of otters", "max_tokens": tokens, "stream": true}).to_string();
    let mut s = TcpStream::connect(server.address).unwrap();
    let head = format!("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended before its first piece");
    }
    reader
}

#[test]
#[cfg_attr(debug_assertions, ignore = "Gemma unoptimized takes minutes: `cargo xtask test host` runs it with --release")]
fn a_full_queue_answers_each_of_1000_requests_with_503_and_retry_after() {
    let gemma = model("gemma-3-270m-q4_k_m.gguf");
    let server = Arc::new(Server::start(gemma.to_str().unwrap(), &["--parallel", "1", "--queue", "2", "--ctx", "4096"]));
    // one generation holds the slot, two more wait in the queue: it is full
    let running = stream_in_background(&server, 4000);
    let queued: Vec<_> = (0..2)
        .map(|_| {
            let server = server.clone();
            std::thread::spawn(move || server.post("/v1/completions", &json!({"prompt": "Otters", "max_tokens": 2})).status)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let server = server.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let r = server.post("/v1/completions", &json!({"prompt": "Once upon a time", "max_tokens": 8}));
                    assert!(r.headers.to_ascii_lowercase().contains("retry-after: 1"), "{} {}", r.headers, r.body);
                    assert!(r.error(503).contains("busy"));
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    eprintln!("1000 requests refused in {:.2} s", t.elapsed().as_secs_f64());
    assert_eq!(server.health()["slots_processing"], 1, "the long generation is still running");
    drop(running);
    for q in queued {
        assert_eq!(q.join().unwrap(), 200, "the queued requests ran once the slot was free");
    }
    assert_eq!(server.health()["status"], "ok");
    let after = server.post("/v1/completions", &json!({"prompt": "Once", "max_tokens": 2}));
    assert_eq!(after.status, 200, "{}", after.body);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "Gemma unoptimized takes minutes: `cargo xtask test host` runs it with --release")]
fn a_client_that_disconnects_mid_stream_frees_its_slot() {
    let server = Server::start(model("gemma-3-270m-q4_k_m.gguf").to_str().unwrap(), &["--ctx", "4096"]);
    let mut reader = stream_in_background(&server, 3000);
    let mut line = String::new();
    for _ in 0..3 {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0);
    }
    assert_eq!(server.health()["slots_processing"], 1);
    drop(reader);
    let t = Instant::now();
    while server.health()["slots_processing"] != 0 {
        assert!(t.elapsed() < Duration::from_secs(2), "the slot is still generating");
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("slot free {:.1} ms after the client went", t.elapsed().as_secs_f64() * 1e3);
    assert!(t.elapsed() < Duration::from_millis(250), "{:?}", t.elapsed());
}
