//! A path → (line, column) index of a YAML document, built from saphyr-parser's event stream
//! (which carries source positions), so that semantic errors found after the serde parse can
//! still name a line. The same walk refuses duplicate mapping keys anywhere (serde would
//! silently keep the last one) and syntax errors.
//!
//! Paths are spelled as serde_yaml_ng spells them in its errors: keys joined by `.`, sequence
//! items as `[i]` (`entities[0].helmChart.productId`); the root is the empty path.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::error::{quote, DefinitionError};

/// Where a node is named in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Node {
    /// 1-based line of the node's key (mapping values) or of the node (sequence items, root).
    pub line: u32,
    /// 1-based column, with `line`.
    pub column: u32,
    /// 1-based line where the value itself starts.
    pub value_line: u32,
    /// 1-based column where the value itself starts (for a literal block scalar: its
    /// content's indentation plus one).
    pub value_column: u32,
    /// Whether the value is a literal block scalar (`|`), whose text lines map one to one to
    /// lines of the document.
    pub literal: bool,
}

/// What the document's root node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Root {
    /// No node, or a null scalar: an empty document.
    Empty,
    /// A mapping.
    Mapping,
    /// Something else, described for a message ("a sequence").
    Other(&'static str),
}

/// The index of one document.
#[derive(Debug, Clone)]
pub(crate) struct PositionIndex {
    nodes: HashMap<String, Node>,
    /// The root node's kind.
    pub root: Root,
}

enum Frame {
    Map {
        path: String,
        /// Keys seen so far, with the line each was first seen on.
        keys: HashMap<String, u32>,
        /// The key whose value comes next, with its position; `None` when a key comes next.
        pending: Option<(String, u32, u32)>,
        /// Set while a complex (collection) key is being read.
        complex_key: bool,
    },
    Seq {
        path: String,
        next: usize,
    },
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Index bytes a definition of `len` bytes may take: the lengths of the paths of its nodes,
/// summed (each node's path is charged twice: as a key, then as its value). A path repeats its
/// parents' keys, so long keys over many nodes would grow the index with the square of the
/// text (twelve 1,000-character keys over 8,000 nodes: 100 MB); the definitions of the test
/// corpus take at most 1.2 bytes of index per byte of text.
pub(crate) fn max_path_bytes(len: usize) -> usize {
    MIN_PATH_BYTES.saturating_add(PATH_BYTES_PER_BYTE.saturating_mul(len))
}

/// Index bytes any definition may take.
pub(crate) const MIN_PATH_BYTES: usize = 1 << 20;

/// Index bytes a definition may take per byte of its text, on top of [`MIN_PATH_BYTES`].
pub(crate) const PATH_BYTES_PER_BYTE: usize = 8;

/// The state of [`PositionIndex::build`]'s walk.
struct IndexWalk {
    nodes: HashMap<String, Node>,
    stack: Vec<Frame>,
    errors: Vec<DefinitionError>,
    root: Root,
    /// The budget of the paths, [`max_path_bytes`].
    max_path_bytes: usize,
    /// What the paths indexed so far may still add up to.
    path_bytes_left: usize,
}

impl IndexWalk {
    /// Indexes the node `event` starts, if any; an error once the paths pass their budget.
    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), Vec<DefinitionError>> {
        let path = match event {
            Event::Scalar(text, style, _, _) => {
                if self.stack.is_empty() {
                    let null = style == ScalarStyle::Plain
                        && matches!(text.as_ref(), "" | "~" | "null" | "Null" | "NULL");
                    self.root = if null {
                        Root::Empty
                    } else {
                        Root::Other("a scalar")
                    };
                }
                let literal = style == ScalarStyle::Literal;
                self.node(span, Some(text.as_ref()), literal)
            }
            Event::Alias(_) => self.node(span, None, false),
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let mapping = matches!(event, Event::MappingStart(..));
                if self.stack.is_empty() {
                    self.root = if mapping {
                        Root::Mapping
                    } else {
                        Root::Other("a sequence")
                    };
                }
                let path = self.node(span, None, false);
                self.stack.push(if mapping {
                    Frame::Map {
                        path: path.clone(),
                        keys: HashMap::new(),
                        pending: None,
                        complex_key: false,
                    }
                } else {
                    Frame::Seq {
                        path: path.clone(),
                        next: 0,
                    }
                });
                path
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.end();
                return Ok(());
            }
            _ => return Ok(()),
        };
        self.spend(path.len(), span)
    }

    fn node(&mut self, span: Span, scalar: Option<&str>, literal: bool) -> String {
        PositionIndex::node(
            &mut self.stack,
            &mut self.nodes,
            &mut self.errors,
            span,
            scalar,
            literal,
        )
    }

    /// Ends the innermost collection.
    fn end(&mut self) {
        self.stack.pop();
        // A collection that served as a key: its value comes next.
        if let Some(Frame::Map {
            pending,
            complex_key,
            ..
        }) = self.stack.last_mut()
        {
            if *complex_key {
                *complex_key = false;
                *pending = Some(("?".to_string(), 0, 0));
            }
        }
    }

    /// Charges `bytes` of path to the budget; the refusal once it is spent.
    fn spend(&mut self, bytes: usize, span: Span) -> Result<(), Vec<DefinitionError>> {
        match self.path_bytes_left.checked_sub(bytes) {
            Some(left) => {
                self.path_bytes_left = left;
                Ok(())
            }
            None => Err(vec![DefinitionError::new(
                "",
                format!(
                    "module definition: the paths of its nodes take more than {} bytes (keys \
                     too long for how deep and how often they repeat)",
                    self.max_path_bytes
                ),
            )
            .at(to_u32(span.start.line()), to_u32(span.start.col() + 1))]),
        }
    }
}

impl PositionIndex {
    /// Walks `yaml`; the errors are syntax errors (one, located), duplicate keys (all), or
    /// paths too long to index (one, located: see [`max_path_bytes`]).
    pub(crate) fn build(yaml: &str) -> Result<PositionIndex, Vec<DefinitionError>> {
        let mut walk = IndexWalk {
            nodes: HashMap::new(),
            stack: Vec::new(),
            errors: Vec::new(),
            root: Root::Empty,
            max_path_bytes: max_path_bytes(yaml.len()),
            path_bytes_left: max_path_bytes(yaml.len()),
        };
        let mut documents = 0usize;
        let mut parser = Parser::new_from_str(yaml);
        while let Some(next) = parser.next_event() {
            let (event, span) = match next {
                Ok(x) => x,
                Err(e) => {
                    let m = e.marker();
                    let err = DefinitionError::new("", format!("invalid YAML: {}", e.info()))
                        .at(to_u32(m.line()), to_u32(m.col() + 1));
                    return Err(vec![err]);
                }
            };
            if let Event::DocumentStart(_) = event {
                documents += 1;
                if documents > 1 {
                    let err = DefinitionError::new(
                        "",
                        "a definition is one YAML document; more than one is not supported",
                    )
                    .at(to_u32(span.start.line()), to_u32(span.start.col() + 1));
                    return Err(vec![err]);
                }
            }
            walk.event(event, span)?;
        }
        if walk.errors.is_empty() {
            Ok(PositionIndex {
                nodes: walk.nodes,
                root: walk.root,
            })
        } else {
            Err(walk.errors)
        }
    }

    /// Records a node starting at `span` (a key when a mapping expects one) and returns its
    /// path (meaningful for collections, which push a frame with it).
    fn node(
        stack: &mut [Frame],
        nodes: &mut HashMap<String, Node>,
        errors: &mut Vec<DefinitionError>,
        span: Span,
        scalar: Option<&str>,
        literal: bool,
    ) -> String {
        let line = to_u32(span.start.line());
        let column = to_u32(span.start.col() + 1);
        let (path, node) = match stack.last_mut() {
            None => (
                String::new(),
                Node {
                    line,
                    column,
                    value_line: line,
                    value_column: column,
                    literal,
                },
            ),
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                (
                    p,
                    Node {
                        line,
                        column,
                        value_line: line,
                        value_column: column,
                        literal,
                    },
                )
            }
            Some(Frame::Map {
                path,
                keys,
                pending,
                complex_key,
            }) => match pending.take() {
                None => {
                    // This node is a key.
                    let Some(key) = scalar else {
                        *complex_key = true;
                        return join(path, "?");
                    };
                    let key_path = join(path, key);
                    if let Some(first) = keys.get(key) {
                        errors.push(
                            DefinitionError::new(
                                key_path.clone(),
                                format!("duplicate key {} (first at line {first})", quote(key)),
                            )
                            .at(line, column),
                        );
                    } else {
                        keys.insert(key.to_string(), line);
                    }
                    *pending = Some((key.to_string(), line, column));
                    return key_path;
                }
                Some((key, key_line, key_column)) => {
                    // A complex key has no position of its own: use the value's.
                    let (key_line, key_column) = if key_line == 0 {
                        (line, column)
                    } else {
                        (key_line, key_column)
                    };
                    (
                        join(path, &key),
                        Node {
                            line: key_line,
                            column: key_column,
                            value_line: line,
                            value_column: column,
                            literal,
                        },
                    )
                }
            },
        };
        // The first occurrence wins: a duplicate key's value does not move the original.
        nodes.entry(path.clone()).or_insert(node);
        path
    }

    /// The node at `path`, if the document has one there.
    pub(crate) fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// Line and column of `path`, or of its nearest enclosing node present in the text
    /// (a missing field is reported where its parent is); the document start at worst.
    pub(crate) fn locate(&self, path: &str) -> (u32, u32) {
        let mut p = path;
        loop {
            if let Some(n) = self.nodes.get(p) {
                return (n.line, n.column);
            }
            if p.is_empty() {
                return (1, 1);
            }
            p = parent_path(p);
        }
    }

    /// Fills in the line and column of `error` when it has none.
    pub(crate) fn locate_error(&self, error: &mut DefinitionError) {
        if error.line.is_none() {
            let (line, column) = self.locate(&error.path);
            error.line = Some(line);
            error.column = Some(column);
        }
    }
}

/// `a.b[2]` → `a.b`, `a.b` → `a`, `a` → ``.
fn parent_path(p: &str) -> &str {
    if p.ends_with(']') {
        if let Some(i) = p.rfind('[') {
            return &p[..i];
        }
    }
    match p.rfind('.') {
        Some(i) => &p[..i],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
name: m
variables:
  a:
    type: string
entities:
  - type: helmChart
    helmChart:
      productId: g:p
      configOverrides: |
        \"1.0.0\":
          overrides: {}
";

    #[test]
    fn paths_have_lines() {
        let idx = PositionIndex::build(DOC).unwrap();
        assert_eq!(idx.root, Root::Mapping);
        assert_eq!(idx.locate("name"), (1, 1));
        assert_eq!(idx.locate("variables.a.type"), (4, 5));
        assert_eq!(idx.locate("entities[0]"), (6, 5));
        assert_eq!(idx.locate("entities[0].helmChart.productId"), (8, 7));
        // Missing fields are reported at their parent.
        assert_eq!(idx.locate("entities[0].helmChart.k8sNamespace"), (7, 5));
        assert_eq!(idx.locate("nothing.here[3]"), (1, 1));
        let n = idx.get("entities[0].helmChart.configOverrides").unwrap();
        assert!(n.literal);
        assert_eq!((n.value_line, n.value_column), (10, 9));
    }

    #[test]
    fn duplicate_keys_anywhere() {
        let yaml = "a: 1\nb:\n  c: 1\n  c: 2\n  d: {e: 1, e: 2}\na: 3\n";
        let errs = PositionIndex::build(yaml).unwrap_err();
        let shown: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "b.c: duplicate key \"c\" (first at line 3) (line 4, column 3)",
                "b.d.e: duplicate key \"e\" (first at line 5) (line 5, column 13)",
                "a: duplicate key \"a\" (first at line 1) (line 6, column 1)",
            ]
        );
    }

    #[test]
    fn syntax_errors_and_documents() {
        let errs = PositionIndex::build("a: b: c\n").unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.starts_with("invalid YAML: mapping values"));
        assert_eq!((errs[0].line, errs[0].column), (Some(1), Some(5)));
        let errs = PositionIndex::build("a: 1\n---\nb: 2\n").unwrap_err();
        assert!(errs[0].message.contains("more than one"));
        assert_eq!(PositionIndex::build("").unwrap().root, Root::Empty);
        assert_eq!(PositionIndex::build("# c\n").unwrap().root, Root::Empty);
        assert_eq!(PositionIndex::build("~").unwrap().root, Root::Empty);
        assert_eq!(
            PositionIndex::build("- a").unwrap().root,
            Root::Other("a sequence")
        );
        // Complex keys do not confuse the walk.
        let idx = PositionIndex::build("? [a, b]\n: 1\nc: 2\n").unwrap();
        assert_eq!(idx.locate("c"), (3, 1));
    }
}
