//! A model answer larger than the cap fails the call as a provider error naming the
//! limit, however it is sent (chunked without end, or with a huge declared length),
//! instead of growing the worker without bound.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{FakeLease, task};
use railyard_worker::agent::{Agent, Outcome};
use railyard_worker::output::Discard;
use railyard_worker::provider::{
    AnthropicProvider, ModelRequest, OpenAiProvider, Provider, ProviderError, RetryPolicy,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const LIMIT: u64 = 256 * 1024;

#[derive(Clone, Copy)]
enum Send {
    /// `transfer-encoding: chunked`, JSON that never ends.
    EndlessChunks,
    /// A 10 GiB `content-length`, then bytes until the client hangs up.
    HugeLength,
    /// An error status with an endless body: only an excerpt is read.
    EndlessError,
}

/// A model endpoint speaking HTTP/1.1 by hand, so the body can be anything. Answers
/// every request the same way; returns its base URL.
async fn endless_model(send: Send) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // Read the request head and body (the client sends content-length).
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                let head_end = loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let filler = vec![b'a'; 64 * 1024];
                let head = match send {
                    Send::EndlessChunks => {
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                            .to_string()
                    }
                    Send::HugeLength => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        10u64 << 30
                    ),
                    Send::EndlessError => {
                        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
                            .to_string()
                    }
                };
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunked = !matches!(send, Send::HugeLength);
                let mut first = true;
                loop {
                    let mut piece = Vec::new();
                    let body: &[u8] = if first && !matches!(send, Send::EndlessError) {
                        b"{\"id\": \"msg\", \"content\": [{\"type\": \"text\", \"text\": \""
                    } else {
                        &filler
                    };
                    first = false;
                    if chunked {
                        piece.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                        piece.extend_from_slice(body);
                        piece.extend_from_slice(b"\r\n");
                    } else {
                        piece.extend_from_slice(body);
                    }
                    // Ends when the client hangs up.
                    if sock.write_all(&piece).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
    }
}

fn providers(base: &str) -> Vec<Arc<dyn Provider>> {
    vec![
        Arc::new(
            AnthropicProvider::new(base, "sk-ant-test", "claude-test", 1024)
                .unwrap()
                .with_retry(fast_retry())
                .with_max_response_bytes(LIMIT),
        ),
        Arc::new(
            OpenAiProvider::new(&format!("{base}/v1"), Some("sk-test"), "gpt-test")
                .unwrap()
                .with_retry(fast_retry())
                .with_max_response_bytes(LIMIT),
        ),
    ]
}

async fn complete(p: &dyn Provider) -> Result<(), ProviderError> {
    let req = ModelRequest {
        system: "s".into(),
        messages: vec![railyard_worker::provider::Message::user_text("hi")],
        ..Default::default()
    };
    tokio::time::timeout(Duration::from_secs(60), p.complete(&req, &Discard))
        .await
        .expect("the call ends instead of reading forever")
        .map(|_| ())
}

#[tokio::test]
async fn an_endless_or_oversized_answer_fails_the_call_naming_the_limit() {
    for send in [Send::EndlessChunks, Send::HugeLength] {
        let base = endless_model(send).await;
        for provider in providers(&base) {
            let err = complete(provider.as_ref()).await.unwrap_err();
            assert!(
                matches!(err, ProviderError::ResponseTooLarge { limit: LIMIT, .. }),
                "{}: {err:?}",
                provider.name()
            );
            assert!(!err.is_retryable());
            let msg = err.to_string();
            assert!(
                msg.contains("larger than the limit of 262144 bytes (max_model_response_bytes)"),
                "{msg}"
            );
        }
    }
}

#[tokio::test]
async fn an_endless_error_body_is_cut_to_an_excerpt() {
    let base = endless_model(Send::EndlessError).await;
    for provider in providers(&base) {
        let err = complete(provider.as_ref()).await.unwrap_err();
        assert!(
            matches!(err, ProviderError::Http { status: 400, retryable: false, ref body } if body.len() < 1000),
            "{}: {err:?}",
            provider.name()
        );
    }
}

#[tokio::test]
async fn the_step_fails_as_a_provider_error() {
    let base = endless_model(Send::EndlessChunks).await;
    let provider = providers(&base).remove(0);
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(provider)
        .run_step(&task("s", "do it"), "q", ws.path(), &lease)
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("expected a failure, got {:?}", report.outcome)
    };
    assert_eq!(f.error_type, "provider_error");
    assert!(f.non_retryable);
    assert!(f.message.contains("max_model_response_bytes"), "{}", f.message);
}
