//! Reading one incoming JSON-RPC message, for both transports of the gateway, so that
//! input that is not a message gets a JSON-RPC error rather than silence (stdio: rmcp
//! drops a line that is not JSON) or a bare HTTP status (`/mcp`: rmcp answers 415 to
//! a body that does not deserialize): `-32700` (parse error) for text that is not
//! JSON, `-32600` (invalid request) for JSON that is not a client message. The error
//! names no id (`"id": null`, as JSON-RPC 2.0 requires when the id cannot be read).

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};

/// JSON-RPC's code for input that is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for JSON that is not a valid request.
pub const INVALID_REQUEST: i64 = -32600;

/// The longest reason quoted in a refusal: a deserializer's message may quote the
/// input (an unknown method name, say), which may be megabytes long.
const MAX_REASON: usize = 200;

/// Why an incoming message was refused, and the JSON-RPC error that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    /// `Parse error: ...` or `Invalid Request: ...`.
    pub message: String,
    /// The input was a well-formed notification (a `method` and no `id`): JSON-RPC
    /// never answers one, so over stdio it is dropped (rmcp drops notifications it
    /// does not know, too); over HTTP the refusal is the answer's body.
    pub notification: bool,
}

impl Refusal {
    /// A parse error: `bytes` were not JSON.
    pub fn parse_error(reason: impl std::fmt::Display) -> Self {
        Self {
            code: PARSE_ERROR,
            message: format!("Parse error: {}", clip(&reason.to_string())),
            notification: false,
        }
    }

    /// An invalid request: JSON, but not a message this gateway reads.
    pub fn invalid_request(reason: impl std::fmt::Display) -> Self {
        Self {
            code: INVALID_REQUEST,
            message: format!("Invalid Request: {}", clip(&reason.to_string())),
            notification: false,
        }
    }

    /// The JSON-RPC error object, `{"jsonrpc":"2.0","id":null,"error":{...}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": self.code, "message": self.message},
        })
    }
}

fn clip(reason: &str) -> String {
    railyard_text::cut(reason, MAX_REASON, "…")
}

/// One incoming message from its bytes (a UTF-8 byte order mark before it is
/// allowed, as rmcp allows it), or the refusal to answer it with.
pub fn read(bytes: &[u8]) -> Result<ClientJsonRpcMessage, Refusal> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
        Ok(message) => Ok(message),
        Err(e) => match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                Err(Refusal::parse_error(e))
            }
            serde_json::error::Category::Data | serde_json::error::Category::Io => {
                let mut refusal = Refusal::invalid_request(e);
                refusal.notification = is_notification(bytes);
                Err(refusal)
            }
        },
    }
}

/// Whether `bytes` are a JSON object with a string `method` and no `id`.
fn is_notification(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes)
        .is_ok_and(|v| v.get("method").is_some_and(Value::is_string) && v.get("id").is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_read() {
        let ping = br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
        assert!(read(ping).is_ok());
        let with_bom = [b"\xEF\xBB\xBF".as_slice(), ping].concat();
        assert!(read(&with_bom).is_ok());
    }

    #[test]
    fn text_that_is_not_json_is_a_parse_error() {
        for garbage in [&b"not json"[..], b"{\"jsonrpc\":", b"\xff\xfe", b""] {
            let refusal = read(garbage).unwrap_err();
            assert_eq!(refusal.code, PARSE_ERROR, "{garbage:?}");
            assert!(refusal.message.starts_with("Parse error: "), "{refusal:?}");
            assert!(!refusal.notification);
            assert_eq!(refusal.to_json()["id"], Value::Null);
        }
    }

    #[test]
    fn json_that_is_not_a_message_is_an_invalid_request() {
        let refusal = read(br#"{"hello":1}"#).unwrap_err();
        assert_eq!(refusal.code, INVALID_REQUEST);
        assert!(!refusal.notification);
        let refusal = read(br#"{"jsonrpc":"2.0","method":7}"#).unwrap_err();
        assert_eq!(refusal.code, INVALID_REQUEST);
    }

    #[test]
    fn the_reason_is_bounded() {
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{}","params":7}}"#,
            "x".repeat(100_000)
        );
        if let Err(refusal) = read(long.as_bytes()) {
            assert!(
                refusal.message.len() < MAX_REASON + 40,
                "{}",
                refusal.message.len()
            );
        }
        let refusal = Refusal::invalid_request("y".repeat(10_000));
        assert!(refusal.message.len() < MAX_REASON + 40);
    }
}
