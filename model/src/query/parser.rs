//! Recursive descent over the tokens of [`super::lexer`]:
//!
//! ```text
//! query     := [or] [ORDER BY field [ASC | DESC]] END
//! or        := and (OR and)*
//! and       := unary (AND unary)*
//! unary     := "(" or ")" | predicate
//! predicate := field ( op value | [NOT] IN "(" value ("," value)* ")"
//!                    | STARTS_WITH string | IS [NOT] NULL )
//! ```
//!
//! Every literal is read as its field's type here, so evaluation never meets a
//! mistyped value.

use chrono::DateTime;

use super::lexer::{Tok, Token, lex};
use super::{
    AttributeTypes, Builtin, CmpOp, Direction, Expr, Field, MAX_DEPTH, MAX_IN_VALUES, MAX_PREDICATES, Query,
    QueryError, Value, ValueType,
};
use crate::run::RunStatus;

const KEYWORDS: [&str; 12] = [
    "AND",
    "OR",
    "IN",
    "NOT",
    "IS",
    "NULL",
    "STARTS_WITH",
    "ORDER",
    "BY",
    "ASC",
    "DESC",
    "TRUE",
];

pub(super) fn parse(text: &str, attributes: &AttributeTypes) -> Result<Query, QueryError> {
    let tokens = lex(text)?;
    let mut p = Parser {
        tokens,
        at: 0,
        attributes,
        depth: 0,
        predicates: 0,
    };
    let filter = if p.peek_keyword("ORDER") || p.peek().kind == Tok::End {
        None
    } else {
        Some(p.or()?)
    };
    let mut order = (Builtin::StartTime, Direction::Desc);
    if p.eat_keyword("ORDER") {
        p.expect_keyword("BY")?;
        let t = p.next();
        let field = match &t.kind {
            Tok::Ident(name) => builtin(name).ok_or_else(|| {
                QueryError::at(
                    t.column,
                    format!("ORDER BY takes a built-in field, found {}", t.kind.describe()),
                )
            })?,
            other => {
                return Err(QueryError::at(
                    t.column,
                    format!("expected a field after ORDER BY, found {}", other.describe()),
                ));
            }
        };
        let dir = if p.eat_keyword("ASC") {
            Direction::Asc
        } else {
            p.eat_keyword("DESC");
            Direction::Desc
        };
        order = (field, dir);
    }
    let t = p.peek();
    if t.kind != Tok::End {
        let expected = if filter.is_some() {
            "AND, OR, ORDER BY or the end of the query"
        } else {
            "a condition or ORDER BY"
        };
        return Err(QueryError::at(
            t.column,
            format!("expected {expected}, found {}", t.kind.describe()),
        ));
    }
    Ok(Query { filter, order })
}

fn builtin(name: &str) -> Option<Builtin> {
    Builtin::ALL
        .into_iter()
        .find(|b| b.name().eq_ignore_ascii_case(name))
}

struct Parser<'a> {
    tokens: Vec<Token>,
    at: usize,
    attributes: &'a AttributeTypes,
    depth: usize,
    predicates: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        // The lexer always ends with `End`, and `next` never moves past it.
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if t.kind != Tok::End {
            self.at += 1;
        }
        t
    }

    fn peek_keyword(&self, kw: &str) -> bool {
        matches!(&self.peek().kind, Tok::Ident(s) if s.eq_ignore_ascii_case(kw))
    }

    fn eat_keyword(&mut self, kw: &str) -> bool {
        let found = self.peek_keyword(kw);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect_keyword(&mut self, kw: &str) -> Result<(), QueryError> {
        if self.eat_keyword(kw) {
            return Ok(());
        }
        let t = self.peek();
        Err(QueryError::at(
            t.column,
            format!("expected {kw}, found {}", t.kind.describe()),
        ))
    }

    fn expect(&mut self, kind: Tok, what: &str) -> Result<(), QueryError> {
        let t = self.next();
        if t.kind == kind {
            return Ok(());
        }
        Err(QueryError::at(
            t.column,
            format!("expected {what}, found {}", t.kind.describe()),
        ))
    }

    fn or(&mut self) -> Result<Expr, QueryError> {
        let mut terms = vec![self.and()?];
        while self.eat_keyword("OR") {
            terms.push(self.and()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::Or(terms)
        })
    }

    fn and(&mut self) -> Result<Expr, QueryError> {
        let mut terms = vec![self.unary()?];
        while self.eat_keyword("AND") {
            terms.push(self.unary()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::And(terms)
        })
    }

    fn unary(&mut self) -> Result<Expr, QueryError> {
        if self.peek().kind == Tok::LParen {
            let open = self.next();
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(QueryError::at(
                    open.column,
                    format!("parentheses nest deeper than the limit of {MAX_DEPTH}"),
                ));
            }
            let inner = self.or()?;
            self.expect(Tok::RParen, "`)`, AND or OR")?;
            self.depth -= 1;
            return Ok(inner);
        }
        self.predicate()
    }

    fn field(&mut self) -> Result<Field, QueryError> {
        let t = self.next();
        let Tok::Ident(name) = &t.kind else {
            return Err(QueryError::at(
                t.column,
                format!("expected a field name or `(`, found {}", t.kind.describe()),
            ));
        };
        if let Some(b) = builtin(name) {
            return Ok(Field::Builtin(b));
        }
        if let Some(ty) = self.attributes.get(name) {
            return Ok(Field::Attribute(name.clone(), *ty));
        }
        let what = if KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(name)) {
            format!(
                "expected a field name, found the keyword {}",
                name.to_ascii_uppercase()
            )
        } else {
            format!(
                "unknown field {}: not a built-in field nor a search attribute of the namespace",
                crate::echo(name)
            )
        };
        Err(QueryError::at(t.column, what))
    }

    fn predicate(&mut self) -> Result<Expr, QueryError> {
        let field_col = self.peek().column;
        let field = self.field()?;
        self.predicates += 1;
        if self.predicates > MAX_PREDICATES {
            return Err(QueryError::at(
                field_col,
                format!("more than {MAX_PREDICATES} conditions"),
            ));
        }
        let t = self.next();
        let op = match &t.kind {
            Tok::Eq => CmpOp::Eq,
            Tok::Ne => CmpOp::Ne,
            Tok::Lt => CmpOp::Lt,
            Tok::Le => CmpOp::Le,
            Tok::Gt => CmpOp::Gt,
            Tok::Ge => CmpOp::Ge,
            Tok::Ident(k) if k.eq_ignore_ascii_case("IS") => {
                let not = self.eat_keyword("NOT");
                self.expect_keyword("NULL")?;
                return Ok(Expr::IsNull(field, not));
            }
            Tok::Ident(k) if k.eq_ignore_ascii_case("STARTS_WITH") => {
                if !matches!(field.value_type(), ValueType::Keyword | ValueType::Text) {
                    return Err(QueryError::at(
                        t.column,
                        format!(
                            "STARTS_WITH needs a keyword or text field, and {} is {}",
                            field.name(),
                            field.value_type().name()
                        ),
                    ));
                }
                let v = self.next();
                let Tok::Str(prefix) = v.kind else {
                    return Err(QueryError::at(
                        v.column,
                        format!("expected a string after STARTS_WITH, found {}", v.kind.describe()),
                    ));
                };
                return Ok(Expr::StartsWith(field, prefix));
            }
            Tok::Ident(k) if k.eq_ignore_ascii_case("IN") || k.eq_ignore_ascii_case("NOT") => {
                let negated = k.eq_ignore_ascii_case("NOT");
                if negated {
                    self.expect_keyword("IN")?;
                }
                return self.in_list(field, negated);
            }
            other => {
                return Err(QueryError::at(
                    t.column,
                    format!(
                        "expected an operator (=, !=, <, >, <=, >=, IN, STARTS_WITH, IS) after {}, found {}",
                        field.name(),
                        other.describe()
                    ),
                ));
            }
        };
        let ordered = !matches!(op, CmpOp::Eq | CmpOp::Ne);
        if ordered
            && matches!(
                field.value_type(),
                ValueType::Bool | ValueType::KeywordList | ValueType::Text
            )
        {
            return Err(QueryError::at(
                t.column,
                format!(
                    "{} is {}: it takes = and != only",
                    field.name(),
                    field.value_type().name()
                ),
            ));
        }
        if ordered && field == Field::Builtin(Builtin::Status) {
            return Err(QueryError::at(t.column, "Status takes =, != and IN only"));
        }
        let value = self.value(&field)?;
        Ok(Expr::Cmp(field, op, value))
    }

    fn in_list(&mut self, field: Field, negated: bool) -> Result<Expr, QueryError> {
        self.expect(Tok::LParen, "`(` after IN")?;
        let mut values = vec![self.value(&field)?];
        loop {
            let t = self.next();
            match t.kind {
                Tok::Comma => {
                    if values.len() == MAX_IN_VALUES {
                        return Err(QueryError::at(
                            t.column,
                            format!("IN takes at most {MAX_IN_VALUES} values"),
                        ));
                    }
                    values.push(self.value(&field)?);
                }
                Tok::RParen => break,
                other => {
                    return Err(QueryError::at(
                        t.column,
                        format!("expected `,` or `)` in the IN list, found {}", other.describe()),
                    ));
                }
            }
        }
        Ok(Expr::In(field, values, negated))
    }

    /// A literal, read as `field`'s type.
    fn value(&mut self, field: &Field) -> Result<Value, QueryError> {
        let t = self.next();
        let ty = field.value_type();
        let mismatch = |t: &Token| {
            QueryError::at(
                t.column,
                format!(
                    "expected {} value for {}, found {}",
                    article(ty),
                    field.name(),
                    t.kind.describe()
                ),
            )
        };
        match (ty, &t.kind) {
            (ValueType::Keyword | ValueType::Text | ValueType::KeywordList, Tok::Str(s)) => {
                if *field == Field::Builtin(Builtin::Status) {
                    return status(s)
                        .map(|st| Value::Str(st.name().into()))
                        .ok_or_else(|| {
                            QueryError::at(
                                t.column,
                                format!(
                                    "unknown status {}: one of RUNNING, COMPLETED, FAILED, CANCELED, TERMINATED, TIMED_OUT",
                                    crate::echo(s)
                                ),
                            )
                        });
                }
                Ok(Value::Str(s.clone()))
            }
            (ValueType::Datetime, Tok::Str(s)) => DateTime::parse_from_rfc3339(s)
                .map(|d| Value::Time(d.timestamp_millis()))
                .map_err(|e| {
                    QueryError::at(
                        t.column,
                        format!("{} is not an RFC 3339 time ({e})", crate::echo(s)),
                    )
                }),
            (ValueType::Int, Tok::Number(n)) => n
                .parse::<i64>()
                .map(Value::Int)
                .map_err(|_| QueryError::at(t.column, format!("{n} is not an integer in range"))),
            (ValueType::Double, Tok::Number(n)) => n
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Value::Double)
                .ok_or_else(|| QueryError::at(t.column, format!("{n} is not a number"))),
            (ValueType::Bool, Tok::Ident(b)) if b.eq_ignore_ascii_case("true") => Ok(Value::Bool(true)),
            (ValueType::Bool, Tok::Ident(b)) if b.eq_ignore_ascii_case("false") => Ok(Value::Bool(false)),
            (ValueType::Bool, Tok::Str(b)) if b.eq_ignore_ascii_case("true") => Ok(Value::Bool(true)),
            (ValueType::Bool, Tok::Str(b)) if b.eq_ignore_ascii_case("false") => Ok(Value::Bool(false)),
            _ => Err(mismatch(&t)),
        }
    }
}

fn article(ty: ValueType) -> String {
    match ty {
        ValueType::Int => "an int".into(),
        ValueType::Datetime => "a datetime (an RFC 3339 string)".into(),
        ValueType::Bool => "a bool (true or false)".into(),
        ValueType::Double => "a number".into(),
        ValueType::KeywordList => "a keyword (a string)".into(),
        other => format!("a {} (a string)", other.name()),
    }
}

/// A status by its name: `FAILED`, `Failed`, `TimedOut`, `TIMED_OUT`.
pub(super) fn status(name: &str) -> Option<RunStatus> {
    let plain: String = name
        .trim_start_matches("RUN_STATUS_")
        .chars()
        .filter(|c| *c != '_')
        .collect();
    RunStatus::ALL
        .into_iter()
        .find(|s| s.name().replace('_', "").eq_ignore_ascii_case(&plain))
}
