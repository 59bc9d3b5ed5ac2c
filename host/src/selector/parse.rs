//! The string syntax of label selectors: lexer and parser, as apimachinery's.

use super::error::{Error, Result, snippet};
use super::requirement::{Operator, Requirement};
use super::validate::{check_key, check_value};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok<'a> {
    Ident(&'a str),
    Bang,
    Eq,
    EqEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

#[derive(Clone, Copy)]
pub(super) struct Token<'a> {
    pub(super) tok: Tok<'a>,
    /// Byte offset in the input.
    pub(super) at: usize,
}

pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

pub(super) fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the input into tokens, ending with [`Tok::End`]. Every boundary is at an ASCII byte,
/// so slicing never splits a UTF-8 character. Unlike apimachinery's lexer, a NUL byte is an
/// ordinary character (and so fails validation) instead of silently ending the input.
pub(super) fn lex(s: &str) -> Vec<Token<'_>> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if is_space(b) {
            i += 1;
            continue;
        }
        let next = bytes.get(i + 1).copied();
        let (tok, len) = match b {
            b'!' if next == Some(b'=') => (Tok::NotEq, 2),
            b'=' if next == Some(b'=') => (Tok::EqEq, 2),
            b'!' => (Tok::Bang, 1),
            b'=' => (Tok::Eq, 1),
            b'>' => (Tok::Gt, 1),
            b'<' => (Tok::Lt, 1),
            b'(' => (Tok::Open, 1),
            b')' => (Tok::Close, 1),
            b',' => (Tok::Comma, 1),
            _ => {
                let len = bytes[i..]
                    .iter()
                    .take_while(|&&c| !is_space(c) && !is_special(c))
                    .count();
                (Tok::Ident(&s[i..i + len]), len)
            }
        };
        out.push(Token { tok, at: i });
        i += len;
    }
    out.push(Token {
        tok: Tok::End,
        at: s.len(),
    });
    out
}

pub(super) fn describe(tok: Tok<'_>) -> String {
    let s = match tok {
        Tok::Ident(s) => return format!("'{}'", snippet(s)),
        Tok::End => return "end of input".to_string(),
        Tok::Bang => "!",
        Tok::Eq => "=",
        Tok::EqEq => "==",
        Tok::NotEq => "!=",
        Tok::Gt => ">",
        Tok::Lt => "<",
        Tok::Open => "(",
        Tok::Close => ")",
        Tok::Comma => ",",
    };
    format!("'{s}'")
}

pub(super) fn unexpected(t: Token<'_>, expected: &'static str) -> Error {
    Error::Syntax {
        offset: t.at,
        found: describe(t.tok),
        expected,
    }
}

pub(super) struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
    end: usize,
}

impl<'a> Parser<'a> {
    pub(super) fn new(s: &'a str) -> Self {
        Self {
            tokens: lex(s),
            pos: 0,
            end: s.len(),
        }
    }

    pub(super) fn peek(&self) -> Token<'a> {
        // `lex` always ends with End and `bump` never moves past it; the fallback only keeps a
        // broken invariant from becoming a panic on user input.
        self.tokens.get(self.pos).copied().unwrap_or(Token {
            tok: Tok::End,
            at: self.end,
        })
    }

    pub(super) fn bump(&mut self) -> Token<'a> {
        let t = self.peek();
        if t.tok != Tok::End {
            self.pos += 1;
        }
        t
    }

    pub(super) fn requirement(&mut self) -> Result<Requirement> {
        let negated = self.peek().tok == Tok::Bang;
        if negated {
            self.bump();
        }
        let key_tok = self.bump();
        let Tok::Ident(key) = key_tok.tok else {
            let expected = if negated {
                "a label key after '!'"
            } else {
                "a label key or '!'"
            };
            return Err(unexpected(key_tok, expected));
        };
        check_key(key, &format!("byte {}", key_tok.at))?;
        let next = self.peek();
        if negated {
            if !matches!(next.tok, Tok::Comma | Tok::End) {
                return Err(unexpected(
                    next,
                    "',' or end of input after '!key' ('!' takes no value)",
                ));
            }
            return Ok(Requirement::new(key, Operator::DoesNotExist, Vec::new()));
        }
        let op_tok = match next.tok {
            Tok::Comma | Tok::End => {
                return Ok(Requirement::new(key, Operator::Exists, Vec::new()));
            }
            _ => self.bump(),
        };
        let operator = match op_tok.tok {
            Tok::Eq | Tok::EqEq => Operator::Equals,
            Tok::NotEq => Operator::NotEquals,
            Tok::Ident("in") => Operator::In,
            Tok::Ident("notin") => Operator::NotIn,
            Tok::Gt => {
                return Err(Error::UnsupportedOperator {
                    offset: op_tok.at,
                    operator: ">",
                });
            }
            Tok::Lt => {
                return Err(Error::UnsupportedOperator {
                    offset: op_tok.at,
                    operator: "<",
                });
            }
            _ => {
                return Err(unexpected(
                    op_tok,
                    "an operator (=, ==, !=, in, notin), ',' or end of input after a label key",
                ));
            }
        };
        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        let mut owned = Vec::with_capacity(values.len());
        for (value, at) in values {
            check_value(key, value, &format!("byte {at}"))?;
            owned.push(value.to_string());
        }
        Ok(Requirement::new(key, operator, owned))
    }

    /// The value after `=`, `==` or `!=`; nothing before `,` or the end means the empty value.
    fn exact_value(&mut self) -> Result<(&'a str, usize)> {
        let t = self.peek();
        match t.tok {
            Tok::Comma | Tok::End => Ok(("", t.at)),
            Tok::Ident(v) => {
                self.bump();
                Ok((v, t.at))
            }
            _ => Err(unexpected(t, "a label value, ',' or end of input")),
        }
    }

    /// `( v1, v2, ... )`. An element may be empty (`(,x)`, `(x,)`, `()`), meaning the empty
    /// value, which is how apimachinery reads those forms too.
    fn value_set(&mut self) -> Result<Vec<(&'a str, usize)>> {
        let open = self.bump();
        if open.tok != Tok::Open {
            return Err(unexpected(open, "'(' after in/notin"));
        }
        let mut values = Vec::new();
        loop {
            let t = self.peek();
            match t.tok {
                Tok::Ident(v) => {
                    self.bump();
                    values.push((v, t.at));
                }
                Tok::Comma | Tok::Close => values.push(("", t.at)),
                _ => return Err(unexpected(t, "a label value, ',' or ')'")),
            }
            let sep = self.bump();
            match sep.tok {
                Tok::Comma => {}
                Tok::Close => return Ok(values),
                _ => return Err(unexpected(sep, "',' or ')' in a value list")),
            }
        }
    }
}
