//! `railyard mcp`'s transport: MCP's stdio framing (one JSON-RPC message a line, each
//! at most [`MAX_LINE`] bytes), as rmcp's own, except that a line which is not a
//! message is answered rather than dropped: text that is not JSON with a JSON-RPC
//! parse error (`-32700`), JSON that is not a message (or a line past [`MAX_LINE`])
//! with an invalid request (`-32600`), both with `"id": null` ([`super::jsonrpc`]).
//! The gateway keeps serving after either.
//!
//! rmcp's transport ignores unparsable lines on purpose (a peer that echoes every
//! answer back as more garbage would loop); a Railyard error is itself valid JSON, so
//! a peer echoing it sends a JSON-RPC response, which is read, not answered.

use std::future::Future;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::service::TxJsonRpcMessage;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use super::jsonrpc::{self, Refusal};

/// The longest line read (rmcp's own bound for stdio); a longer one is dropped as it
/// arrives, never buffered, and answered with an invalid request.
pub const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// MCP over a pair of byte streams (stdin and stdout for `railyard mcp`).
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line being read; it survives a cancelled `receive` (rmcp polls `receive`
    /// in a `select!`), so a partly read line is resumed, not lost.
    line: Vec<u8>,
    /// Dropping the rest of a line that grew past `max_line`.
    discarding: bool,
    max_line: usize,
    write: Arc<Mutex<W>>,
}

/// MCP on this process's stdin and stdout.
pub fn stdio() -> LineTransport<tokio::io::Stdin, tokio::io::Stdout> {
    LineTransport::new(tokio::io::stdin(), tokio::io::stdout())
}

/// What one bounded read of a line found.
enum LineRead {
    Line,
    Oversized,
    Eof,
    Io(std::io::Error),
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading messages from `read` and writing them to `write`.
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            max_line: MAX_LINE,
            write: Arc::new(Mutex::new(write)),
        }
    }

    /// With another bound on a line's length.
    pub fn with_max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line;
        self
    }

    /// Reads one `\n`-terminated line into `self.line`, never holding more than
    /// `max_line` bytes of it. Cancel-safe: nothing is consumed across an await.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let available = match self.read.fill_buf().await {
                Ok(available) => available,
                Err(e) => return LineRead::Io(e),
            };
            if available.is_empty() {
                return LineRead::Eof;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let outcome = if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
                None
            } else if self.line.len().saturating_add(take) > self.max_line {
                self.line.clear();
                self.discarding = newline.is_none();
                Some(LineRead::Oversized)
            } else {
                self.line.extend_from_slice(&available[..take]);
                newline.map(|_| LineRead::Line)
            };
            self.read.consume(take);
            if let Some(outcome) = outcome {
                return outcome;
            }
        }
    }

    /// Answers a refused line; spawned, so a cancelled `receive` cannot lose it.
    fn answer(&self, refusal: Refusal) {
        if refusal.notification {
            tracing::debug!(reason = %refusal.message, "MCP: dropped a notification it does not read");
            return;
        }
        tracing::debug!(code = refusal.code, reason = %refusal.message, "MCP: answered a line that is not a message");
        let mut line = refusal.to_json().to_string().into_bytes();
        line.push(b'\n');
        let write = self.write.clone();
        tokio::spawn(async move {
            if let Err(e) = write_line(&write, &line).await {
                tracing::debug!(error = %e, "MCP: could not write an error answer");
            }
        });
    }
}

async fn write_line<W: AsyncWrite + Unpin>(write: &Mutex<W>, line: &[u8]) -> std::io::Result<()> {
    let mut write = write.lock().await;
    write.write_all(line).await?;
    write.flush().await
}

impl<R, W> rmcp::transport::Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        async move { write_line(&write, &line.map_err(std::io::Error::other)?).await }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            match self.read_line().await {
                LineRead::Line => {}
                LineRead::Oversized => {
                    self.answer(Refusal::invalid_request(format!(
                        "a message longer than {} bytes, the most read",
                        self.max_line
                    )));
                    continue;
                }
                // A last line without its newline is incomplete: nothing to answer.
                LineRead::Eof => return None,
                LineRead::Io(e) => {
                    tracing::error!(error = %e, "MCP: reading stdin failed");
                    return None;
                }
            }
            let text = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                self.line.clear();
                continue;
            }
            let read = jsonrpc::read(text);
            self.line.clear();
            match read {
                Ok(message) => return Some(message),
                Err(refusal) => self.answer(refusal),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use rmcp::transport::Transport;
    use serde_json::Value;
    use tokio::io::AsyncReadExt;

    use super::*;

    /// Feeds `input` to a transport and returns the messages it let through and the
    /// lines it wrote back.
    async fn feed(input: &[u8], max_line: usize) -> (Vec<ClientJsonRpcMessage>, Vec<Value>) {
        let (mut out_read, out_write) = tokio::io::duplex(1 << 20);
        let mut transport = LineTransport::new(input, out_write).with_max_line(max_line);
        let mut messages = Vec::new();
        while let Some(m) = transport.receive().await {
            messages.push(m);
        }
        // The spawned answers hold the writer until they are written.
        for _ in 0..100 {
            if Arc::strong_count(&transport.write) == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(transport);
        let mut text = String::new();
        out_read.read_to_string(&mut text).await.unwrap();
        let answers = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        (messages, answers)
    }

    #[tokio::test]
    async fn a_line_that_is_not_json_is_answered_and_the_next_is_read() {
        let input = b"hello\n\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n{\"a\":1}\n";
        let (messages, answers) = feed(input, MAX_LINE).await;
        assert_eq!(messages.len(), 1);
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0]["error"]["code"], jsonrpc::PARSE_ERROR);
        assert_eq!(answers[0]["id"], Value::Null);
        assert_eq!(answers[0]["jsonrpc"], "2.0");
        assert_eq!(answers[1]["error"]["code"], jsonrpc::INVALID_REQUEST);
    }

    #[tokio::test]
    async fn a_line_too_long_is_answered_without_being_held() {
        let long = format!("{{\"x\":\"{}\"}}\n", "y".repeat(5000));
        let input = [
            long.as_bytes(),
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n",
        ]
        .concat();
        let (messages, answers) = feed(&input, 1024).await;
        assert_eq!(messages.len(), 1);
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0]["error"]["code"], jsonrpc::INVALID_REQUEST);
        assert!(
            answers[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("1024 bytes")
        );
    }

    #[tokio::test]
    async fn an_unknown_notification_is_not_answered() {
        let input = b"{\"jsonrpc\":\"2.0\",\"method\":\"$/lsp\",\"params\":7}\n";
        let (messages, answers) = feed(input, MAX_LINE).await;
        assert!(answers.is_empty(), "{answers:?}");
        assert!(messages.len() <= 1);
    }
}
