//! The query of a MetricTemplate, rendered for one canary metric as Flagger renders it.
//!
//! Flagger renders a template's `query` (and a metric's inline `query`) with Go's
//! `text/template`, with no data (`.` is nil), the option `missingkey=error`, and one function
//! per field of its template model: `name`, `namespace`, `target`, `service`, `ingress`,
//! `route`, `interval`, each returning a string, and `variables`, returning the metric's
//! `templateVariables` map. So `{{ namespace }}` calls a function, and `{{ variables.NAME }}`
//! reads a key of the map, an error when the map lacks it.
//!
//! The hub renders the part of that language query templates are written in, exactly:
//! literal text; actions calling one of the model's functions, or reading one variable;
//! comments (`{{/* ... */}}`); and Go's trim markers (`{{- ` removes the whitespace before the
//! action, ` -}}` the whitespace after it; whitespace being space, tab, CR and LF). Anything
//! else Go's templates can do (pipelines, `if`, `range`, `printf`, string literals, `.`) is
//! refused with [`RenderError::Unsupported`] naming the action, never rendered differently
//! from Flagger. [`parse_query`] checks a template's syntax once (when it is applied);
//! [`render_query`] fills it in for one metric, within [`MAX_RENDERED_QUERY_BYTES`].

use std::collections::BTreeMap;

use thiserror::Error;

/// Largest rendered query, in bytes: a template that repeats a long variable cannot make a
/// check the leader sends (and every node stores) larger than this.
pub const MAX_RENDERED_QUERY_BYTES: usize = 16 * 1024;

/// Characters Go's templates count as whitespace for trim markers.
const GO_SPACE: &[char] = &[' ', '\t', '\r', '\n'];

/// What the model offers a query template (Flagger's `MetricTemplateModel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModelField {
    /// `{{ name }}`: the canary's `metadata.name`.
    Name,
    /// `{{ namespace }}`: the canary's namespace (its hub environment).
    Namespace,
    /// `{{ target }}`: `spec.targetRef.name`.
    Target,
    /// `{{ service }}`: `spec.service.name`, else the target's name.
    Service,
    /// `{{ ingress }}`: `spec.ingressRef.name`, else the target's name.
    Ingress,
    /// `{{ route }}`: `spec.routeRef.name`, else the target's name.
    Route,
    /// `{{ interval }}`: the metric's `interval`, as written.
    Interval,
}

impl ModelField {
    /// Every field, in Flagger's order.
    pub const ALL: [ModelField; 7] = [
        ModelField::Name,
        ModelField::Namespace,
        ModelField::Target,
        ModelField::Service,
        ModelField::Ingress,
        ModelField::Route,
        ModelField::Interval,
    ];

    /// The function's name in a template.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelField::Name => "name",
            ModelField::Namespace => "namespace",
            ModelField::Target => "target",
            ModelField::Service => "service",
            ModelField::Ingress => "ingress",
            ModelField::Route => "route",
            ModelField::Interval => "interval",
        }
    }

    fn parse(word: &str) -> Option<ModelField> {
        ModelField::ALL.into_iter().find(|f| f.as_str() == word)
    }
}

/// One piece of a parsed query template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text (after trim markers took their whitespace).
    Text(String),
    /// `{{ namespace }}` and the other model functions.
    Field(ModelField),
    /// `{{ variables.NAME }}`.
    Variable(String),
}

/// A query template, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryTemplate {
    /// The pieces, in order.
    pub pieces: Vec<Piece>,
}

impl QueryTemplate {
    /// The variables the template reads, each once, in order of first use.
    pub fn variables(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in &self.pieces {
            if let Piece::Variable(v) = p {
                if !out.contains(&v.as_str()) {
                    out.push(v);
                }
            }
        }
        out
    }

    /// Whether the template calls `field`.
    pub fn uses(&self, field: ModelField) -> bool {
        self.pieces.contains(&Piece::Field(field))
    }
}

/// Why a query template cannot be parsed or rendered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RenderError {
    /// `{{` without its `}}`.
    #[error("unclosed action starting at byte {at}")]
    Unclosed {
        /// Byte offset of the `{{`.
        at: usize,
    },
    /// A comment that does not end at its action's `}}`.
    #[error("comment starting at byte {at} is not closed by */}}}}")]
    UnclosedComment {
        /// Byte offset of the `{{`.
        at: usize,
    },
    /// `{{ }}`.
    #[error("empty action at byte {at}")]
    Empty {
        /// Byte offset of the `{{`.
        at: usize,
    },
    /// A name that is neither a model function nor one of Go's built-ins.
    #[error(
        "function {name:?} not defined: a query template may use name, namespace, target, \
         service, ingress, route, interval and variables.NAME"
    )]
    UndefinedFunction {
        /// The name.
        name: String,
    },
    /// Go template syntax the hub does not render (see the module documentation).
    #[error(
        "{{{{{action}}}}} is not supported: the hub renders {{{{ FIELD }}}}, \
         {{{{ variables.NAME }}}}, comments and trim markers"
    )]
    Unsupported {
        /// The action's text, between the delimiters.
        action: String,
    },
    /// `{{ variables.NAME }}` where the metric's `templateVariables` has no `NAME`.
    #[error("variable {name:?} is not defined in templateVariables")]
    UndefinedVariable {
        /// The variable.
        name: String,
    },
    /// A model field the hub cannot fill in for this canary.
    #[error("{{{{ {} }}}} cannot be rendered: {reason}", field.as_str())]
    UnavailableField {
        /// The field.
        field: ModelField,
        /// Why.
        reason: String,
    },
    /// The rendered query exceeds [`MAX_RENDERED_QUERY_BYTES`].
    #[error("the rendered query exceeds {MAX_RENDERED_QUERY_BYTES} bytes")]
    TooLong,
}

/// Parses a query template, refusing what Flagger would refuse and what the hub does not
/// render.
pub fn parse_query(text: &str) -> Result<QueryTemplate, RenderError> {
    let mut pieces = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    // Whether the last action ended with ` -}}`: the text after it loses its leading space.
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut literal = &rest[..open];
        if trim_next {
            literal = literal.trim_start_matches(GO_SPACE);
        }
        let after = &rest[open + 2..];
        let at = offset + open;
        let left_trim = has_left_trim_marker(after);
        if left_trim {
            literal = literal.trim_end_matches(GO_SPACE);
        }
        push_text(&mut pieces, literal);
        let inner_start = if left_trim { 2 } else { 0 };
        let (piece, right_trim, used) = action(&after[inner_start..], at)?;
        if let Some(p) = piece {
            pieces.push(p);
        }
        trim_next = right_trim;
        let consumed = open + 2 + inner_start + used;
        rest = &rest[consumed..];
        offset += consumed;
    }
    let tail = if trim_next {
        rest.trim_start_matches(GO_SPACE)
    } else {
        rest
    };
    push_text(&mut pieces, tail);
    Ok(QueryTemplate { pieces })
}

fn push_text(pieces: &mut Vec<Piece>, text: &str) {
    if !text.is_empty() {
        pieces.push(Piece::Text(text.to_string()));
    }
}

/// Go's left trim marker: `-` followed by whitespace, right after `{{`.
fn has_left_trim_marker(s: &str) -> bool {
    let mut c = s.chars();
    c.next() == Some('-') && c.next().is_some_and(|c| GO_SPACE.contains(&c))
}

/// One action, from just after `{{` (and its left trim marker): its piece (none for a
/// comment), whether it ends with a right trim marker, and the bytes it used through `}}`.
fn action(s: &str, at: usize) -> Result<(Option<Piece>, bool, usize), RenderError> {
    if let Some(body) = s.strip_prefix("/*") {
        let end = body.find("*/").ok_or(RenderError::UnclosedComment { at })?;
        let after = &body[end + 2..];
        let (right_trim, close) = if after.starts_with("}}") {
            (false, 2)
        } else if has_right_trim_marker(after) && after[2..].starts_with("}}") {
            (true, 4)
        } else {
            return Err(RenderError::UnclosedComment { at });
        };
        return Ok((None, right_trim, 2 + end + 2 + close));
    }
    let close = s.find("}}").ok_or(RenderError::Unclosed { at })?;
    let mut inner = &s[..close];
    // A quote could hide a `}}`: string literals are not supported, and the action is
    // refused whole rather than cut at a `}}` inside it.
    if inner.contains(['"', '`', '\'']) {
        return Err(RenderError::Unsupported {
            action: inner.to_string(),
        });
    }
    let right_trim = inner.len() >= 2 && {
        let b = inner.as_bytes();
        b[b.len() - 1] == b'-' && GO_SPACE.contains(&char::from(b[b.len() - 2]))
    };
    if right_trim {
        inner = &inner[..inner.len() - 2];
    }
    let piece = word(inner, at)?;
    Ok((Some(piece), right_trim, close + 2))
}

/// Go's right trim marker: whitespace followed by `-`, just before `}}`.
fn has_right_trim_marker(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|c| GO_SPACE.contains(&c)) && c.next() == Some('-')
}

/// The piece an action's text names: a model function or `variables.NAME`.
fn word(inner: &str, at: usize) -> Result<Piece, RenderError> {
    let text = inner.trim_matches(GO_SPACE);
    if text.is_empty() {
        return Err(RenderError::Empty { at });
    }
    let unsupported = || RenderError::Unsupported {
        action: inner.to_string(),
    };
    let (head, field) = match text.split_once('.') {
        Some((head, field)) => (head, Some(field)),
        None => (text, None),
    };
    if !is_identifier(head) {
        return Err(unsupported());
    }
    match (head, field) {
        ("variables", Some(name)) if is_field_name(name) => Ok(Piece::Variable(name.to_string())),
        ("variables", _) => Err(unsupported()),
        (word, None) => match ModelField::parse(word) {
            Some(f) => Ok(Piece::Field(f)),
            None if is_go_builtin(word) => Err(unsupported()),
            None => Err(RenderError::UndefinedFunction {
                name: word.to_string(),
            }),
        },
        (_, Some(_)) => Err(unsupported()),
    }
}

/// Go's identifier: a letter or `_`, then letters, digits and `_`.
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// A map key reachable as a field (`variables.NAME`): Go's alphanumeric run.
fn is_field_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c == '_' || c.is_alphanumeric())
}

/// Go's keywords and built-in functions: valid in Flagger's templates, not rendered here.
fn is_go_builtin(word: &str) -> bool {
    matches!(
        word,
        "if" | "else"
            | "end"
            | "range"
            | "with"
            | "define"
            | "template"
            | "block"
            | "break"
            | "continue"
            | "nil"
            | "true"
            | "false"
            | "and"
            | "or"
            | "not"
            | "len"
            | "index"
            | "slice"
            | "print"
            | "printf"
            | "println"
            | "html"
            | "js"
            | "urlquery"
            | "call"
            | "eq"
            | "ne"
            | "lt"
            | "le"
            | "gt"
            | "ge"
    )
}

/// The values a template is rendered with (Flagger's `MetricTemplateModel`). A field that is
/// `None` cannot be rendered here ([`RenderError::UnavailableField`], with `unavailable`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateModel {
    /// Values of the model's functions.
    pub fields: BTreeMap<ModelField, String>,
    /// Why a field missing from `fields` cannot be rendered.
    pub unavailable: BTreeMap<ModelField, String>,
    /// The metric's `templateVariables`.
    pub variables: BTreeMap<String, String>,
}

/// Renders a parsed template with `model`.
pub fn render(template: &QueryTemplate, model: &TemplateModel) -> Result<String, RenderError> {
    let mut out = String::new();
    for piece in &template.pieces {
        let value = match piece {
            Piece::Text(t) => t.as_str(),
            Piece::Field(f) => match model.fields.get(f) {
                Some(v) => v.as_str(),
                None => {
                    return Err(RenderError::UnavailableField {
                        field: *f,
                        reason: model
                            .unavailable
                            .get(f)
                            .cloned()
                            .unwrap_or_else(|| "no value".to_string()),
                    })
                }
            },
            Piece::Variable(name) => model
                .variables
                .get(name)
                .ok_or_else(|| RenderError::UndefinedVariable { name: name.clone() })?,
        };
        if out.len() + value.len() > MAX_RENDERED_QUERY_BYTES {
            return Err(RenderError::TooLong);
        }
        out.push_str(value);
    }
    Ok(out)
}

/// Parses and renders `text` with `model` (Flagger's `RenderQuery`).
pub fn render_query(text: &str, model: &TemplateModel) -> Result<String, RenderError> {
    render(&parse_query(text)?, model)
}

/// The query as Flagger's Prometheus provider sends it: every run of whitespace (Go's `\s`:
/// space, tab, LF, FF, CR) made one space.
pub fn prometheus_query_text(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    let mut in_space = false;
    for c in query.chars() {
        if matches!(c, ' ' | '\t' | '\n' | '\u{c}' | '\r') {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c);
            in_space = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(vars: &[(&str, &str)]) -> TemplateModel {
        let mut fields = BTreeMap::new();
        for (f, v) in [
            (ModelField::Name, "standard"),
            (ModelField::Namespace, "default"),
            (ModelField::Target, "myapp"),
            (ModelField::Service, "myapp-svc"),
            (ModelField::Ingress, "myapp-ing"),
            (ModelField::Route, "myapp-route"),
            (ModelField::Interval, "1m"),
        ] {
            fields.insert(f, v.to_string());
        }
        TemplateModel {
            fields,
            unavailable: BTreeMap::new(),
            variables: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn every_field_and_variable_renders() {
        let q = "{{ name }}|{{namespace}}|{{ target }}|{{ service }}|{{ ingress }}|{{ route }}|\
                 {{ interval }}|{{ variables.cluster }}|{{variables.consumer_group}}";
        assert_eq!(
            render_query(q, &model(&[("cluster", "dev"), ("consumer_group", "g")])).unwrap(),
            "standard|default|myapp|myapp-svc|myapp-ing|myapp-route|1m|dev|g"
        );
    }

    #[test]
    fn trim_markers_take_go_whitespace_and_only_with_a_space() {
        let m = model(&[]);
        assert_eq!(
            render_query("a \t\r\n {{- target -}} \n b", &m).unwrap(),
            "amyappb"
        );
        assert_eq!(render_query("a {{- target }} b", &m).unwrap(), "amyapp b");
        assert_eq!(render_query("a {{ target -}}\n b", &m).unwrap(), "a myappb");
        // Without a space, `-` is not a trim marker (Go reads a number): not rendered here.
        assert!(matches!(
            render_query("a {{-target}}", &m),
            Err(RenderError::Unsupported { .. })
        ));
        assert!(matches!(
            render_query("{{target-}}", &m),
            Err(RenderError::Unsupported { .. })
        ));
    }

    #[test]
    fn comments_vanish_and_trim() {
        let m = model(&[]);
        assert_eq!(
            render_query("a {{/* what\n it does */}} b", &m).unwrap(),
            "a  b"
        );
        assert_eq!(render_query("a {{- /* x */ -}} b", &m).unwrap(), "ab");
        assert_eq!(
            render_query("a {{/* x */ }}", &m),
            Err(RenderError::UnclosedComment { at: 2 })
        );
    }

    #[test]
    fn text_without_actions_is_kept_byte_for_byte() {
        let q = "sum(rate(x{a=\"b\"}[5m])) / {c} }} {";
        assert_eq!(render_query(q, &model(&[])).unwrap(), q);
    }

    #[test]
    fn bad_templates_are_refused_by_kind() {
        let m = model(&[]);
        assert_eq!(
            render_query("x {{ target ", &m),
            Err(RenderError::Unclosed { at: 2 })
        );
        assert_eq!(render_query("{{ }}", &m), Err(RenderError::Empty { at: 0 }));
        assert_eq!(
            render_query("{{ cluster }}", &m),
            Err(RenderError::UndefinedFunction {
                name: "cluster".into()
            })
        );
        for bad in [
            "{{ printf \"%s\" target }}",
            "{{ target | printf }}",
            "{{ . }}",
            "{{ .Name }}",
            "{{ if target }}x{{ end }}",
            "{{ variables }}",
            "{{ variables.a.b }}",
            "{{ target.x }}",
            "{{ variables .a }}",
            "{{ \"}}\" }}",
        ] {
            assert!(
                matches!(render_query(bad, &m), Err(RenderError::Unsupported { .. })),
                "{bad}: {:?}",
                render_query(bad, &m)
            );
        }
    }

    #[test]
    fn a_missing_variable_is_an_error_as_with_missingkey_error() {
        let q = "{{ variables.cluster }}-{{ variables.consumer_group }}";
        assert_eq!(
            render_query(q, &model(&[("invalid", "dev"), ("consumer_group", "g")])),
            Err(RenderError::UndefinedVariable {
                name: "cluster".into()
            })
        );
        assert_eq!(
            parse_query(q).unwrap().variables(),
            vec!["cluster", "consumer_group"]
        );
    }

    #[test]
    fn an_unavailable_field_says_why() {
        let mut m = model(&[]);
        m.fields.remove(&ModelField::Route);
        m.unavailable
            .insert(ModelField::Route, "a Knative revision".into());
        let err = render_query("{{ route }}", &m).unwrap_err();
        assert_eq!(
            err.to_string(),
            "{{ route }} cannot be rendered: a Knative revision"
        );
    }

    #[test]
    fn rendering_is_bounded() {
        let long = "v".repeat(MAX_RENDERED_QUERY_BYTES / 2 + 1);
        let m = model(&[("long", &long)]);
        assert_eq!(render_query("{{ variables.long }}", &m).unwrap(), long);
        assert_eq!(
            render_query("{{ variables.long }}{{ variables.long }}", &m),
            Err(RenderError::TooLong)
        );
    }

    #[test]
    fn prometheus_text_collapses_whitespace_runs() {
        assert_eq!(
            prometheus_query_text("sum(\n  rate(x[1m])\t)\r\n/ 2\n"),
            "sum( rate(x[1m]) ) / 2 "
        );
    }
}
