//! Connection strings as they may be shown: never with their password.

/// `url` with any password replaced by `***`: in the user-info of a URL
/// (`postgres://user:secret@host/db`), in a `password=` query parameter, and in a
/// `password=` pair of a key-value connection string. Everything an error or a log
/// line shows of a connection string goes through here.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        // The user-info ends at the last `@` before the path, query or fragment.
        let authority_end = out[rest_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let at = rest_start + at;
            if let Some(colon) = out[rest_start..at].find(':') {
                out.replace_range(rest_start + colon + 1..at, "***");
            }
        }
    }
    redact_pairs(&out)
}

/// Replaces the value of every `password=` key (query parameter or key-value pair).
fn redact_pairs(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = find_key(rest) {
        let value_start = i + "password=".len();
        out.push_str(&rest[..value_start]);
        out.push_str("***");
        let value = &rest[value_start..];
        // A quoted key-value value runs to its closing quote; anything else to the
        // next separator.
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let close = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                close
            });
            close.map_or(value.len(), |(j, _)| j + 2)
        } else {
            value.find(['&', ' ', '#']).unwrap_or(value.len())
        };
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

/// Where a `password=` key starts: at the beginning, or after `?`, `&` or a space.
fn find_key(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find("password=") {
        let at = from + i;
        if at == 0 || s[..at].ends_with(['?', '&', ' ']) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_never_shown() {
        let cases = [
            ("postgres://u:s3cret@db:5432/ry", "postgres://u:***@db:5432/ry"),
            (
                "postgresql://u:p%40ss@db/ry?sslmode=disable",
                "postgresql://u:***@db/ry?sslmode=disable",
            ),
            // An `@` in the password itself (unencoded): the last one ends the user-info.
            ("postgres://u:a@b@db/ry", "postgres://u:***@db/ry"),
            (
                "postgres://db/ry?user=u&password=s3cret&x=1",
                "postgres://db/ry?user=u&password=***&x=1",
            ),
            (
                "postgres://db/ry?password=s3cret",
                "postgres://db/ry?password=***",
            ),
            (
                "host=db user=u password=s3cret dbname=ry",
                "host=db user=u password=*** dbname=ry",
            ),
            (
                "host=db password='se cr\\'et' dbname=ry",
                "host=db password=*** dbname=ry",
            ),
            ("password=s3cret", "password=***"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown, "{url}");
            assert!(!redact(url).contains("s3cret") && !redact(url).contains("se cr"));
        }
    }

    #[test]
    fn a_string_without_a_password_is_left_alone() {
        for url in [
            "postgres://u@db:5432/ry",
            "postgres://db/ry",
            "postgres://u@db/ry?options=-c%20search_path%3Dx",
            "host=db user=u",
            "postgres://u@db/ry?old_password_hint=1",
            "",
        ] {
            assert_eq!(redact(url), url);
        }
    }
}
