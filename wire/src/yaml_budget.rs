//! The parse budget of every YAML document a party sends (issue 51; docs/SECURITY.md
//! "Budgets"): release manifests, canary resources, rollout policies, module definitions and
//! config overrides (a module's `configOverrides` texts, an entity's, the agent's copy).
//!
//! [`check`] is one streaming pass over saphyr-parser's events, run before serde_yaml_ng (or
//! anything else) builds a value from the text. It refuses the document at the event where
//! it passes a limit, before the cost grows:
//!
//! - **depth**: at most [`MAX_DEPTH`] collections deep, counted while reading, and through
//!   aliases (an alias is as deep as the node its anchor names). serde_yaml_ng refuses the same
//!   depth, but only after its parser has read the whole document into events.
//! - **nodes**: at most [`max_nodes`] nodes (scalars and collections), counting every node an
//!   alias repeats. An anchor's size is known when its node ends, so an alias adds that size in
//!   one step and "billion laughs" or a quadratic ladder of aliases is refused after reading
//!   as many events as it is long, never after expanding them. Text without aliases has at
//!   most about 1.5 nodes per byte, well within the budget.
//! - **recursive aliases** (an alias inside the node its anchor names) are refused.
//!
//! saphyr-parser is linear here: it limits flow nesting itself (255 levels, which
//! [`check`] reports as too deep) and otherwise does work proportional to the text times the
//! flow depth, at most [`MAX_DEPTH`] once checked.
//!
//! A text saphyr cannot read is handed to libyaml, serde_yaml_ng's own parser, without
//! building anything (aliases are not followed): if libyaml refuses it too, its error is the
//! answer (the words operators saw before this check existed); if libyaml reads it, the
//! document is refused as one the budget cannot check. Either way, a text [`check`] refuses is
//! never parsed into values.
//!
//! The only way to parse a checked text is [`CheckedYaml`], so serde_yaml_ng is called on
//! checked text only. Pure: no clock, no I/O.

use std::fmt;

use saphyr_parser::{Event, Marker, Parser, ScanError};
use serde::de::{DeserializeOwned, IgnoredAny};

use crate::yaml_error::{from_serde, yaml_shape, YamlError, YamlShape};

/// The deepest nesting of collections a document may have, counted through aliases: the
/// recursion limit serde_yaml_ng already applied to every document the hub parses, so no
/// document it accepted is refused.
pub const MAX_DEPTH: usize = 128;

/// Nodes any document may have, whatever its size.
pub const MIN_NODES: u64 = 10_000;

/// Nodes a document may have per byte of its text, on top of [`MIN_NODES`].
pub const NODES_PER_BYTE: u64 = 2;

/// The most nodes a text of `len` bytes may have, counting every node an alias repeats.
pub fn max_nodes(len: usize) -> u64 {
    MIN_NODES.saturating_add(NODES_PER_BYTE.saturating_mul(len as u64))
}

/// saphyr-parser's message when flow collections nest more than 255 deep.
const SAPHYR_FLOW_DEPTH: &str = "recursion limit exceeded";

/// Which document a text is, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// A release manifest (`PublishRelease`).
    ReleaseManifest,
    /// A canary resource (`ApplyCanary`).
    CanaryResource,
    /// A rollout policy (`ApplyRolloutPolicy`).
    RolloutPolicy,
    /// A metric template resource (`ApplyMetricTemplate`).
    MetricTemplate,
    /// An alert provider resource (`ApplyAlertProvider`).
    AlertProvider,
    /// A module definition (`PublishModule`, the `module_dry_run` query).
    ModuleDefinition,
    /// Config overrides: a module's `configOverrides` or `installConfigOverrides` text, or
    /// one version's overrides of an entity.
    ConfigOverrides,
}

impl Document {
    /// What messages call it ("release manifest").
    pub fn name(self) -> &'static str {
        match self {
            Document::ReleaseManifest => "release manifest",
            Document::CanaryResource => "canary resource",
            Document::RolloutPolicy => "rollout policy",
            Document::MetricTemplate => "metric template",
            Document::AlertProvider => "alert provider",
            Document::ModuleDefinition => "module definition",
            Document::ConfigOverrides => "config overrides",
        }
    }
}

impl fmt::Display for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which limit a document passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overrun {
    /// Nesting deeper than [`MAX_DEPTH`].
    Depth,
    /// More nodes than [`max_nodes`] of its size.
    Nodes {
        /// The document's limit.
        max: u64,
    },
    /// An alias inside the node its anchor names.
    RecursiveAlias,
    /// saphyr-parser cannot read it (its reason), though libyaml can: the budget cannot be
    /// checked.
    Unreadable(String),
}

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overrun::Depth => write!(f, "nesting deeper than {MAX_DEPTH}"),
            Overrun::Nodes { max } => write!(
                f,
                "more than {max} values once aliases are expanded (at most {MIN_NODES} plus \
                 {NODES_PER_BYTE} per byte)"
            ),
            Overrun::RecursiveAlias => f.write_str("an alias inside the node its anchor names"),
            Overrun::Unreadable(reason) => write!(f, "YAML the hub cannot check: {reason}"),
        }
    }
}

/// A document refused by its budget: which document, which limit, and where (1-based).
///
/// Display: `release manifest: nesting deeper than 128 at line 3, column 9`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{document}: {overrun} at line {line}, column {column}")]
pub struct BudgetError {
    /// The document.
    pub document: Document,
    /// The limit it passed.
    pub overrun: Overrun,
    /// 1-based line of the node where it passed the limit.
    pub line: u32,
    /// 1-based column, with `line`.
    pub column: u32,
}

impl BudgetError {
    fn at(document: Document, overrun: Overrun, marker: &Marker) -> Self {
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        BudgetError {
            document,
            overrun,
            line: n(marker.line()),
            column: n(marker.col()).saturating_add(1),
        }
    }

    /// The message without its location (`release manifest: nesting deeper than 128`), for
    /// error types that carry the line and column apart.
    pub fn reason(&self) -> String {
        format!("{}: {}", self.document, self.overrun)
    }
}

/// Why [`check`] refused a text.
#[derive(Debug, thiserror::Error)]
pub enum YamlRefusal {
    /// It passed a limit.
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// It is not YAML: libyaml's error, as serde_yaml_ng reports it.
    #[error(transparent)]
    Syntax(serde_yaml_ng::Error),
}

impl YamlRefusal {
    /// The refusal as a document-level [`YamlError`], located.
    pub fn to_yaml_error(&self) -> YamlError {
        match self {
            YamlRefusal::Budget(e) => YamlError::new("", e.reason()).at(e.line, e.column),
            YamlRefusal::Syntax(e) => from_serde(e),
        }
    }
}

/// A text [`check`] accepted: the only way the hub parses YAML into values.
#[derive(Debug, Clone, Copy)]
pub struct CheckedYaml<'a> {
    text: &'a str,
}

impl<'a> CheckedYaml<'a> {
    /// The text.
    pub fn text(self) -> &'a str {
        self.text
    }

    /// The text parsed into `T` by serde_yaml_ng.
    pub fn parse<T: DeserializeOwned>(self) -> Result<T, serde_yaml_ng::Error> {
        serde_yaml_ng::from_str(self.text)
    }

    /// The document's top-level kind, with its document-level checks
    /// ([`crate::yaml_error::yaml_shape`]).
    pub fn shape(self) -> Result<YamlShape, serde_yaml_ng::Error> {
        yaml_shape(self.text)
    }
}

/// Checks `text`, a `document`, against its budget; see the module documentation.
pub fn check(document: Document, text: &str) -> Result<CheckedYaml<'_>, YamlRefusal> {
    let mut walk = Walk::new(max_nodes(text.len()));
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        match next {
            Ok((event, span)) => walk
                .event(&event)
                .map_err(|overrun| BudgetError::at(document, overrun, &span.start))?,
            Err(e) => return Err(unreadable(document, text, &e)),
        }
    }
    Ok(CheckedYaml { text })
}

/// The refusal of a text saphyr-parser could not read (see the module documentation).
fn unreadable(document: Document, text: &str, e: &ScanError) -> YamlRefusal {
    if e.info() == SAPHYR_FLOW_DEPTH {
        return BudgetError::at(document, Overrun::Depth, e.marker()).into();
    }
    // libyaml reads the events without following aliases (nothing is built), in time linear
    // in the text.
    match serde_yaml_ng::from_str::<IgnoredAny>(text) {
        Err(syntax) => YamlRefusal::Syntax(syntax),
        Ok(_) => BudgetError::at(document, Overrun::Unreadable(e.info().into()), e.marker()).into(),
    }
}

/// A collection being read.
struct Open {
    /// Its anchor id (0: none).
    anchor: usize,
    /// Nodes counted before it.
    nodes_before: u64,
    /// How many collections deep its contents go so far (1 for `[a]`).
    height: usize,
}

/// What an anchor names, once its node has ended.
#[derive(Debug, Clone, Copy)]
struct Anchored {
    /// Nodes in it, aliases inside it expanded.
    nodes: u64,
    /// Collections deep (0 for a scalar).
    height: usize,
}

/// The running counts of [`check`].
struct Walk {
    max_nodes: u64,
    nodes: u64,
    open: Vec<Open>,
    /// By anchor id; `None` while its node is open.
    anchors: Vec<Option<Anchored>>,
}

impl Walk {
    fn new(max_nodes: u64) -> Self {
        Walk {
            max_nodes,
            nodes: 0,
            open: Vec::new(),
            anchors: Vec::new(),
        }
    }

    /// Counts one event; the limit it passes, if any.
    fn event(&mut self, event: &Event<'_>) -> Result<(), Overrun> {
        let (node, anchor) = match event {
            Event::Scalar(_, _, anchor, _) => (
                Anchored {
                    nodes: 1,
                    height: 0,
                },
                *anchor,
            ),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => (
                Anchored {
                    nodes: 1,
                    height: 1,
                },
                *anchor,
            ),
            Event::Alias(id) => match self.anchors.get(*id).copied().flatten() {
                Some(named) => (named, 0),
                None => return Err(Overrun::RecursiveAlias),
            },
            Event::SequenceEnd | Event::MappingEnd => {
                self.close();
                return Ok(());
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => return Ok(()),
        };
        self.nodes = self.nodes.saturating_add(node.nodes);
        if self.nodes > self.max_nodes {
            return Err(Overrun::Nodes {
                max: self.max_nodes,
            });
        }
        if self.open.len() + node.height > MAX_DEPTH {
            return Err(Overrun::Depth);
        }
        if matches!(event, Event::SequenceStart(..) | Event::MappingStart(..)) {
            self.name(anchor, None);
            self.open.push(Open {
                anchor,
                nodes_before: self.nodes - 1,
                height: 1,
            });
        } else {
            self.name(anchor, Some(node));
            self.raise_parent(node.height);
        }
        Ok(())
    }

    /// Ends the innermost collection: its size and height are known now.
    fn close(&mut self) {
        let Some(done) = self.open.pop() else {
            return;
        };
        let named = Anchored {
            nodes: self.nodes - done.nodes_before,
            height: done.height,
        };
        self.name(done.anchor, Some(named));
        self.raise_parent(done.height);
    }

    /// The innermost open collection holds a node `height` collections deep.
    fn raise_parent(&mut self, height: usize) {
        if let Some(parent) = self.open.last_mut() {
            parent.height = parent.height.max(height + 1);
        }
    }

    /// Records what anchor `id` names (`None` while its node is open); id 0 is no anchor.
    fn name(&mut self, id: usize, what: Option<Anchored>) {
        if id == 0 {
            return;
        }
        if self.anchors.len() <= id {
            self.anchors.resize(id + 1, None);
        }
        self.anchors[id] = what;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> BudgetError {
        match check(Document::ConfigOverrides, text) {
            Err(YamlRefusal::Budget(e)) => e,
            other => panic!("{text:.60?}: {other:?}"),
        }
    }

    /// Nine anchors, each nine aliases of the one before: 9^9 values from 342 bytes.
    fn laughs() -> String {
        let mut s = String::from("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
        let mut prev = 'a';
        for name in 'b'..='i' {
            let item = format!("*{prev}");
            s.push_str(&format!("{name}: &{name} [{}]\n", vec![item; 9].join(",")));
            prev = name;
        }
        s
    }

    #[test]
    fn ordinary_documents_pass() {
        for text in [
            "",
            "# only a comment\n",
            "a: 1\nb: [x, {c: d}]\n",
            "base: &b {x: 1, y: [1, 2]}\nprod: *b\nstaging: *b\n",
            "- &x 1\n- *x\n- *x\n",
            "a: 1\n---\nb: 2\n",
        ] {
            check(Document::ConfigOverrides, text).unwrap();
        }
        let deep = format!("{}x{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        check(Document::ConfigOverrides, &deep).unwrap();
    }

    #[test]
    fn nesting_is_refused_where_it_passes_the_limit() {
        let over = MAX_DEPTH + 1;
        let e = refused(&format!(
            "a: 1\nb: {}x{}",
            "[".repeat(over),
            "]".repeat(over)
        ));
        assert_eq!(e.overrun, Overrun::Depth);
        // The mapping is the first collection: the 128th `[` (column 4 + 127) the 129th.
        assert_eq!((e.line, e.column), (2, 131));
        assert_eq!(
            e.to_string(),
            "config overrides: nesting deeper than 128 at line 2, column 131"
        );
        // saphyr refuses flow nesting past 255 itself, before any event: still the depth.
        assert_eq!(refused(&"[".repeat(100_000)).overrun, Overrun::Depth);
        assert_eq!(refused(&"{a: ".repeat(50_000)).overrun, Overrun::Depth);
        assert_eq!(refused(&"- ".repeat(100_000)).overrun, Overrun::Depth);
        let block: String = (0..200).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert_eq!(refused(&block).overrun, Overrun::Depth);
        // Through an alias: 100 deep, then an alias of something 29 deep.
        let nested = format!("{}x{}", "[".repeat(29), "]".repeat(29));
        let text = format!("a: &a {nested}\nb: {}*a{}", "[".repeat(99), "]".repeat(99));
        assert_eq!(refused(&text).overrun, Overrun::Depth);
    }

    #[test]
    fn alias_expansion_is_counted() {
        let e = refused(&laughs());
        assert!(matches!(e.overrun, Overrun::Nodes { .. }), "{e}");
        assert!(
            e.to_string().contains("values once aliases are expanded"),
            "{e}"
        );
        // Quadratic: one anchor of n items repeated n times.
        let n = 2_000;
        let items = vec!["x"; n].join(",");
        let aliases = vec!["*a"; n].join(",");
        let e = refused(&format!("a: &a [{items}]\nb: [{aliases}]\n"));
        assert!(matches!(e.overrun, Overrun::Nodes { .. }), "{e}");
        // A ladder: each anchor one more than the one before, every one repeated. Each rung
        // also nests one deeper: refused at rung 127, as too deep, after 16,000 nodes.
        let mut ladder = String::from("a0: &a0 [x]\n");
        for i in 1..3_000 {
            ladder.push_str(&format!("a{i}: &a{i} [*a{}, x]\n", i - 1));
        }
        let e = refused(&ladder);
        assert_eq!((&e.overrun, e.line), (&Overrun::Depth, 128), "{e}");
        // Flat rungs: a wide anchor, then rungs of ten aliases of it.
        let mut flat = format!("w: &w [{}]\n", vec!["x"; 1_000].join(","));
        for i in 0..1_000 {
            flat.push_str(&format!("r{i}: [{}]\n", ["*w"; 10].join(",")));
        }
        assert!(matches!(refused(&flat).overrun, Overrun::Nodes { .. }));
        assert_eq!(refused("a: &a [b, *a]\n").overrun, Overrun::RecursiveAlias);
    }

    #[test]
    fn syntax_errors_keep_libyamls_words() {
        match check(Document::ReleaseManifest, "a: b: c\n") {
            Err(YamlRefusal::Syntax(e)) => {
                assert!(
                    e.to_string().contains("mapping values are not allowed"),
                    "{e}"
                )
            }
            other => panic!("{other:?}"),
        }
        // An unknown anchor, and a second document that is broken.
        assert!(matches!(
            check(Document::ReleaseManifest, "a: *nope\n"),
            Err(YamlRefusal::Syntax(_))
        ));
        assert!(matches!(
            check(Document::ReleaseManifest, "a: 1\n---\n[b\n"),
            Err(YamlRefusal::Syntax(_))
        ));
    }

    #[test]
    fn checked_text_parses() {
        let checked = check(Document::ConfigOverrides, "a: [1, 2]\n").unwrap();
        assert_eq!(checked.shape().unwrap(), YamlShape::Mapping);
        let v: serde_yaml_ng::Value = checked.parse().unwrap();
        assert_eq!(v["a"][1], serde_yaml_ng::Value::from(2));
        assert_eq!(checked.text(), "a: [1, 2]\n");
    }
}
