//! A fetched HTML page as text: laid out by html2text (headings, lists, tables and
//! links as Markdown-like marks) unless it nests too deeply, whose parse takes time
//! growing with the square of the depth; such a page gets its text without layout,
//! in one linear pass.

/// Deepest nesting (as [`nesting`] estimates it) laid out by html2text.
pub(crate) const MAX_DEPTH: usize = 256;
/// Columns the laid-out text is wrapped to.
const WIDTH: usize = 100;

/// Elements that have no end tag, or whose end tag may be left out (a second one
/// closes the first): they do not deepen the tree.
const FLAT: [&str; 31] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr",
    "param", "keygen", "p", "li", "dt", "dd", "td", "th", "tr", "thead", "tbody", "tfoot", "option",
    "optgroup", "colgroup", "rb", "rt", "rp",
];

/// `html` as text.
pub(crate) fn to_text(html: &[u8]) -> Result<String, String> {
    if nesting(html) > MAX_DEPTH {
        return Ok(format!(
            "[web_fetch: the page nests deeper than {MAX_DEPTH} elements; its text is shown without layout]\n{}",
            strip(html)
        ));
    }
    html2text::config::plain()
        .string_from_read(html, WIDTH)
        .map_err(|e| format!("the HTML could not be read: {e}"))
}

/// The tag at `html[i]` (just after a `<`): whether it ends an element, its name
/// (lower case), whether it closes itself (`/>`), and the index after its `>`.
fn tag(html: &[u8], i: usize) -> Option<(bool, String, bool, usize)> {
    let end = html[i..].starts_with(b"/");
    let start = i + usize::from(end);
    let name_len = html[start..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-')
        .count();
    if name_len == 0 || !html[start].is_ascii_alphabetic() {
        return None;
    }
    let name = String::from_utf8_lossy(&html[start..start + name_len]).to_ascii_lowercase();
    let close = html[start..].iter().position(|b| *b == b'>').map(|p| start + p)?;
    Some((end, name, html[close - 1] == b'/', close + 1))
}

/// An estimate of how deep `html` nests: start tags less end tags, leaving out the
/// elements that do not nest.
pub(crate) fn nesting(html: &[u8]) -> usize {
    let (mut depth, mut deepest, mut i) = (0usize, 0usize, 0usize);
    let last_gt = html.iter().rposition(|b| *b == b'>').unwrap_or(0);
    while let Some(p) = html[i..].iter().position(|b| *b == b'<') {
        i += p + 1;
        // Past the last `>` no tag ends: stop rather than look again from each `<`.
        if i > last_gt {
            break;
        }
        if let Some(after) = comment_end(html, i) {
            i = after;
            continue;
        }
        let Some((end, name, self_closing, next)) = tag(html, i) else {
            continue;
        };
        i = next;
        if FLAT.contains(&name.as_str()) || self_closing {
            continue;
        }
        if end {
            depth = depth.saturating_sub(1);
        } else {
            depth += 1;
            deepest = deepest.max(depth);
        }
    }
    deepest
}

/// The text of `html` without its tags, scripts and styles; block elements break
/// lines, the common entities are decoded, runs of blank space are one.
pub(crate) fn strip(html: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    let mut text_from = 0;
    let last_gt = html.iter().rposition(|b| *b == b'>').unwrap_or(0);
    while let Some(p) = html[i..].iter().position(|b| *b == b'<') {
        let lt = i + p;
        i = lt + 1;
        if i > last_gt {
            break;
        }
        if let Some(after) = comment_end(html, i) {
            push_text(&mut out, &html[text_from..lt]);
            (i, text_from) = (after, after);
            continue;
        }
        let Some((end, name, _, next)) = tag(html, i) else {
            continue;
        };
        push_text(&mut out, &html[text_from..lt]);
        i = next;
        if !end && (name == "script" || name == "style") {
            let closing = format!("</{name}");
            i = find_ci(html, i, closing.as_bytes()).unwrap_or(html.len());
        }
        text_from = i;
        if matches!(
            name.as_str(),
            "p" | "div" | "br" | "li" | "tr" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "pre" | "table"
        ) && !out.ends_with('\n')
        {
            out.push('\n');
        }
    }
    push_text(&mut out, &html[text_from.min(html.len())..]);
    out.trim().to_string()
}

/// After the comment starting at `html[i]` (just after a `<`), if one does.
fn comment_end(html: &[u8], i: usize) -> Option<usize> {
    if !html[i..].starts_with(b"!--") {
        return None;
    }
    Some(find_ci(html, i + 3, b"-->").map_or(html.len(), |p| p + 3))
}

/// Where `needle` (lower case) next occurs in `hay` from `from`, in any case.
fn find_ci(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
        .map(|p| from + p)
}

fn push_text(out: &mut String, raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    let text = text
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    for word in text.split_whitespace() {
        if !(out.is_empty() || out.ends_with('\n')) {
            out.push(' ');
        }
        out.push_str(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_estimated_and_deep_pages_are_stripped() {
        assert_eq!(
            nesting(b"<html><body><div><p>a<p>b<br><img src=x/></div></body></html>"),
            3
        );
        assert_eq!(nesting(b"<ul><li>a<li>b</ul><ul><li>c</ul>"), 1);
        assert_eq!(
            nesting(b"<svg><g><path d='x'/></g></svg><!-- <div><div><div> --> a < b"),
            2
        );
        // No `>` after many `<`: one pass, not one per `<`.
        assert_eq!(nesting("<a".repeat(200_000).as_bytes()), 0);
        let deep = format!(
            "{}deep &amp; text{}",
            "<div>".repeat(100_000),
            "</div>".repeat(100_000)
        );
        let text = to_text(deep.as_bytes()).unwrap();
        assert!(text.ends_with("without layout]\ndeep & text"), "{text}");
        assert_eq!(strip(b"a <!-- <p>hidden</p> --> b"), "a b");
        assert_eq!(
            strip(b"<h1>Title</h1><script>var x = '<p>';</script><STYLE>p{}</STYLE><p>one  two</p>three"),
            "Title\none two\nthree"
        );
    }
}
