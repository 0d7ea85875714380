//! An MCP tool result as what the model reads: text as is; images of the types
//! models take passed on (bounded) and described, for providers that take none;
//! audio and binary resources described; the text cut to a size with a marker.

use serde_json::Value;

use crate::provider::ToolImage;
use crate::tools::ToolOutput;

/// Image types passed on to the model.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
/// Largest image passed on, as base64 bytes.
pub(crate) const MAX_IMAGE: usize = 512 * 1024;
/// Most images passed on from one result.
const MAX_IMAGES: usize = 4;

/// The model's view of a `tools/call` result (its JSON), cut at `cap` bytes, with
/// `redact` applied before the cut.
pub(super) fn output(result: &Value, cap: usize, redact: impl Fn(&str) -> String) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        let kind = block["type"].as_str().unwrap_or_default();
        let mime = block["mimeType"].as_str().unwrap_or("unknown type");
        let part = match kind {
            "text" => block["text"].as_str().unwrap_or_default().to_string(),
            "image" => match image(block, mime, images.len()) {
                Ok(img) => {
                    images.push(img);
                    format!(
                        "[image {} ({mime}, {} bytes base64)]",
                        images.len(),
                        images.last().map_or(0, |i: &ToolImage| i.data.len())
                    )
                }
                Err(why) => format!(
                    "[image ({mime}, {} bytes base64): not shown to the model, {why}]",
                    block["data"].as_str().map_or(0, str::len)
                ),
            },
            "audio" => format!(
                "[{kind} ({mime}, {} bytes base64): not shown to the model]",
                block["data"].as_str().map_or(0, str::len)
            ),
            "resource" => {
                let r = &block["resource"];
                let uri = r["uri"].as_str().unwrap_or_default();
                match r["text"].as_str() {
                    Some(text) => format!("[resource {uri}]\n{text}"),
                    None => format!(
                        "[resource {uri} ({}, {} bytes base64): not shown]",
                        r["mimeType"].as_str().unwrap_or("unknown type"),
                        r["blob"].as_str().map_or(0, str::len)
                    ),
                }
            }
            "resource_link" => format!(
                "[resource link {} {}]",
                block["uri"].as_str().unwrap_or_default(),
                block["name"].as_str().unwrap_or_default()
            ),
            other => format!("[{} content]", crate::provider::excerpt(other, 40)),
        };
        parts.push(part);
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        parts.push(structured.to_string());
    }
    let text = redact(&parts.join("\n"));
    let text = cut(&text, cap);
    let mut out = if result["isError"].as_bool().unwrap_or(false) {
        ToolOutput::error(text)
    } else {
        ToolOutput::ok(text)
    };
    out.images = images;
    out
}

/// The image of an `image` block, or why it is not passed on.
fn image(block: &Value, mime: &str, already: usize) -> Result<ToolImage, &'static str> {
    let data = block["data"].as_str().unwrap_or_default();
    if !IMAGE_TYPES.contains(&mime) {
        return Err("a type models do not take");
    }
    if data.len() > MAX_IMAGE {
        return Err("larger than 512 KiB of base64");
    }
    if already >= MAX_IMAGES {
        return Err("more than 4 images in one result");
    }
    let base64 = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
    if data.is_empty() || !data.bytes().all(base64) {
        return Err("not base64");
    }
    Ok(ToolImage {
        media_type: mime.to_string(),
        data: data.to_string(),
    })
}

/// `text` cut at `cap` bytes (on a character boundary), with a marker saying so.
pub(super) fn cut(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let kept = railyard_model::text::prefix(text, cap);
    format!(
        "{kept}\n[MCP result cut: {} of {} bytes shown]",
        kept.len(),
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_render_cut_and_redacted() {
        let r = json!({"content": [
            {"type": "text", "text": "hello sekrit-1"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}}
        ]});
        let out = output(&r, 1000, |s| s.replace("sekrit-1", "[redacted]"));
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "hello [redacted]\n[image 1 (image/png, 4 bytes base64)]\n[resource file:///a]\nbody"
        );
        assert_eq!(
            out.images,
            vec![ToolImage {
                media_type: "image/png".into(),
                data: "AAAA".into()
            }]
        );
        let odd = json!({"content": [
            {"type": "image", "data": "AAAA", "mimeType": "image/tiff"},
            {"type": "image", "data": "A".repeat(MAX_IMAGE + 1), "mimeType": "image/png"},
            {"type": "image", "data": "not base64!", "mimeType": "image/png"}
        ]});
        let out = output(&odd, 1000, |s| s.to_string());
        assert!(out.images.is_empty());
        assert_eq!(
            out.content,
            format!(
                "[image (image/tiff, 4 bytes base64): not shown to the model, a type models do not take]\n\
                 [image (image/png, {} bytes base64): not shown to the model, larger than 512 KiB of base64]\n\
                 [image (image/png, 11 bytes base64): not shown to the model, not base64]",
                MAX_IMAGE + 1
            )
        );
        let long = json!({"content": [{"type": "text", "text": "x".repeat(100)}], "isError": true});
        let out = output(&long, 10, |s| s.to_string());
        assert!(out.is_error);
        assert_eq!(
            out.content,
            format!("{}\n[MCP result cut: 10 of 100 bytes shown]", "x".repeat(10))
        );
        let s = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(output(&s, 100, |s| s.to_string()).content, r#"{"n":1}"#);
    }
}
