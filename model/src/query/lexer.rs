//! Tokens of a list query. Columns are counted in characters from 1, as a user
//! counts them in what they typed.

use super::QueryError;

/// One token and the column it starts at.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub kind: Tok,
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    /// A field name, or a keyword (the parser compares it case-insensitively).
    Ident(String),
    Str(String),
    /// A number as written (the field's type says how to read it).
    Number(String),
    LParen,
    RParen,
    Comma,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    End,
}

impl Tok {
    /// How an error names it.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => crate::echo(s),
            Tok::Str(s) => format!("string {}", crate::echo(s)),
            Tok::Number(s) => format!("number {s}"),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Eq => "`=`".into(),
            Tok::Ne => "`!=`".into(),
            Tok::Lt => "`<`".into(),
            Tok::Le => "`<=`".into(),
            Tok::Gt => "`>`".into(),
            Tok::Ge => "`>=`".into(),
            Tok::End => "the end of the query".into(),
        }
    }
}

/// Splits `text` into tokens, ending with [`Tok::End`].
pub(super) fn lex(text: &str) -> Result<Vec<Token>, QueryError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let single = |kind| Token { kind, column };
        match c {
            '(' => {
                out.push(single(Tok::LParen));
                i += 1;
            }
            ')' => {
                out.push(single(Tok::RParen));
                i += 1;
            }
            ',' => {
                out.push(single(Tok::Comma));
                i += 1;
            }
            '=' => {
                out.push(single(Tok::Eq));
                i += 1;
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                out.push(single(Tok::Ne));
                i += 2;
            }
            '<' => match chars.get(i + 1) {
                Some('=') => {
                    out.push(single(Tok::Le));
                    i += 2;
                }
                Some('>') => {
                    out.push(single(Tok::Ne));
                    i += 2;
                }
                _ => {
                    out.push(single(Tok::Lt));
                    i += 1;
                }
            },
            '>' => {
                if chars.get(i + 1) == Some(&'=') {
                    out.push(single(Tok::Ge));
                    i += 2;
                } else {
                    out.push(single(Tok::Gt));
                    i += 1;
                }
            }
            '"' | '\'' => {
                let (s, next) = string(&chars, i)?;
                out.push(Token {
                    kind: Tok::Str(s),
                    column,
                });
                i = next;
            }
            c if c.is_ascii_digit() || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) => {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                    i += 1;
                }
                out.push(Token {
                    kind: Tok::Number(chars[start..i].iter().collect()),
                    column,
                });
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Token {
                    kind: Tok::Ident(chars[start..i].iter().collect()),
                    column,
                });
            }
            other => {
                return Err(QueryError::at(column, format!("unexpected character {other:?}")));
            }
        }
    }
    out.push(Token {
        kind: Tok::End,
        column: chars.len() + 1,
    });
    Ok(out)
}

/// A quoted string from `chars[start]` (its quote): `\` escapes the next character.
fn string(chars: &[char], start: usize) -> Result<(String, usize), QueryError> {
    let quote = chars[start];
    let mut s = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let Some(&next) = chars.get(i + 1) else { break };
                s.push(next);
                i += 2;
            }
            c if c == quote => return Ok((s, i + 1)),
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(QueryError::at(start + 1, "string is not closed"))
}
