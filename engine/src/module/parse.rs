//! Parsing and single-file validation of a module definition (SPEC M1–M7, M11, M13, S3).
//!
//! [`parse_definition`] refuses an oversized text before reading it, then walks the YAML
//! events once (syntax errors, duplicate keys, a path → line index), lets serde read the
//! shape (unknown fields, wrong types), and finally checks everything that can be checked
//! within one file, collecting every problem with its path and line. Checks that need other
//! modules are in [`super::validate_against`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use semver::Version;

use super::config::{count_unset, parse_document};
use super::definition::{
    EntityOverride, EntityTemplate, ModuleDefinition, MultikeySecret, Restrictions, SubmoduleRef,
    SyncMode, Uninstall, UnmanageAfterUninstall,
};
use super::error::{quote, DefinitionError, DefinitionErrors};
use super::placeholder::{self, Kind, Placeholder};
use super::position::{PositionIndex, Root};
use super::raw::{
    RawConstraint, RawDefinition, RawEntity, RawEntityOverride, RawOptionsVariable, RawSecret,
    RawStringVariable, RawSubmodule, RawSyncMode, RawUninstall, RawVariable,
};
use super::variable::{
    anchored_regex, is_variable_name, list, sample_values, Constraint, Variable,
};
use crate::entity::EntityKind;
use crate::error::CommandError;
use crate::name::{validate_name, validate_product_id};
use crate::yaml_budget::{self, Document, Overrun, YamlRefusal};

/// Largest definition text accepted, in bytes; a larger one is refused before parsing.
pub const MAX_DEFINITION_BYTES: usize = 256 * 1024;

/// Most substitutions tried per config text when checking that every known value of its
/// variables still gives a valid document.
const MAX_VALUE_TRIALS: usize = 64;

/// Most bytes of config text, placeholders filled in, one definition's validation parses: for
/// the sample values (a definition whose texts come to more is refused), and again for the
/// trials of other known values (which stop there, as they stop after [`MAX_VALUE_TRIALS`] per
/// text). A value repeats wherever a placeholder names it, so without it a 256 KiB definition
/// had its validation parse 100 MB.
pub const MAX_FILLED_BYTES: usize = 1 << 20;

/// Parses and validates one module definition. `file_name`, when given (a bare name or a
/// path), must be `<name>.yml` or `<name>.yaml`. Every problem is reported, each with its
/// YAML path and line; cross-module checks are [`super::validate_against`]'s.
pub fn parse_definition(
    file_name: Option<&str>,
    yaml: &str,
) -> Result<ModuleDefinition, DefinitionErrors> {
    parse_indexed(file_name, yaml).map(|(def, _)| def)
}

/// [`parse_definition`], also returning the position index for locating later errors.
pub(crate) fn parse_indexed(
    file_name: Option<&str>,
    yaml: &str,
) -> Result<(ModuleDefinition, PositionIndex), DefinitionErrors> {
    if yaml.len() > MAX_DEFINITION_BYTES {
        return Err(DefinitionErrors::single(DefinitionError::new(
            "",
            format!(
                "definition is {} bytes, at most {MAX_DEFINITION_BYTES} bytes allowed",
                yaml.len()
            ),
        )));
    }
    let checked = match yaml_budget::check(Document::ModuleDefinition, yaml) {
        Ok(checked) => Ok(checked),
        Err(YamlRefusal::Budget(e)) if !matches!(e.overrun, Overrun::Unreadable(_)) => {
            return Err(DefinitionErrors::single(
                YamlRefusal::Budget(e).to_yaml_error(),
            ))
        }
        // Text saphyr cannot read: the position index (saphyr too) says why, as it always has.
        Err(refusal) => Err(refusal),
    };
    let index = PositionIndex::build(yaml).map_err(to_errors)?;
    let checked = checked.map_err(|e| DefinitionErrors::single(e.to_yaml_error()))?;
    match index.root {
        Root::Mapping => {}
        Root::Empty => {
            return Err(DefinitionErrors::single(
                DefinitionError::new(
                    "",
                    "definition is empty: expected a mapping with name, variables, entities, ...",
                )
                .at(1, 1),
            ))
        }
        Root::Other(found) => {
            return Err(DefinitionErrors::single(
                DefinitionError::new(
                    "",
                    format!("a definition must be a YAML mapping of fields, got {found}"),
                )
                .at(1, 1),
            ))
        }
    }
    let raw: RawDefinition = checked.parse().map_err(|e| {
        let mut err = serde_error(&e);
        index.locate_error(&mut err);
        DefinitionErrors::single(err)
    })?;
    let mut v = Validator {
        index: &index,
        errors: Vec::new(),
        sampled_left: Some(MAX_FILLED_BYTES),
        trials_left: MAX_FILLED_BYTES,
    };
    let def = v.definition(raw, file_name);
    match DefinitionErrors::from_vec(v.errors) {
        None => Ok((def, index)),
        Some(errors) => Err(errors),
    }
}

fn to_errors(errors: Vec<DefinitionError>) -> DefinitionErrors {
    DefinitionErrors::from_vec(errors).unwrap_or_else(|| {
        // Not reached: the index reports failure only with at least one error.
        DefinitionErrors::single(DefinitionError::new("", "invalid YAML"))
    })
}

/// A serde_yaml_ng error as a [`DefinitionError`] (see [`crate::yaml_error::from_serde`]).
pub(crate) use crate::yaml_error::from_serde as serde_error;

/// The reason of a name-validation error, without the field it names.
fn reason(e: CommandError) -> String {
    match e {
        CommandError::InvalidField { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// What templates of this definition may reference.
struct Ctx<'a> {
    variables: &'a BTreeMap<String, Variable>,
    samples: &'a BTreeMap<String, String>,
}

impl Ctx<'_> {
    fn sample(&self, name: &str) -> &str {
        self.samples.get(name).map_or("x", String::as_str)
    }
}

struct Validator<'a> {
    index: &'a PositionIndex,
    errors: Vec<DefinitionError>,
    /// What the config texts with sample values may still add up to ([`MAX_FILLED_BYTES`]);
    /// `None` once they passed it.
    sampled_left: Option<usize>,
    /// What the trials of other values may still parse ([`MAX_FILLED_BYTES`]).
    trials_left: usize,
}

impl Validator<'_> {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let mut e = DefinitionError::new(path, message);
        self.index.locate_error(&mut e);
        self.errors.push(e);
    }

    /// An error inside the text of a string field, at `inner` (line, column) of that text
    /// when known: a literal block scalar (`|`) maps the text's lines and columns onto the
    /// document's; otherwise the field itself is named.
    fn err_in_text(&mut self, path: &str, message: impl Into<String>, inner: Option<(u32, u32)>) {
        let mut e = DefinitionError::new(path, message);
        match (self.index.get(path), inner) {
            (Some(node), Some((line, column))) if node.literal && line > 0 && column > 0 => {
                e.line = Some(node.value_line.saturating_add(line - 1));
                e.column = Some(node.value_column.saturating_add(column - 1));
            }
            _ => self.index.locate_error(&mut e),
        }
        self.errors.push(e);
    }

    /// Reports how `type` and the blocks present disagree: `type` must name one of
    /// `blocks` and exactly that block must be present.
    fn tagged_errors(&mut self, path: &str, what: &str, kind: &str, blocks: &[(&str, bool)]) {
        if !blocks.iter().any(|(name, _)| *name == kind) {
            self.err(
                format!("{path}.type"),
                format!(
                    "unknown {what} type {}: expected {}",
                    quote(kind),
                    list(blocks.iter().map(|(n, _)| *n))
                ),
            );
            return;
        }
        for (name, present) in blocks {
            if *name == kind && !present {
                self.err(
                    format!("{path}.{name}"),
                    format!("required: `type: {kind}` needs the `{name}:` block"),
                );
            }
            if *name != kind && *present {
                self.err(
                    format!("{path}.{name}"),
                    format!(
                        "not allowed with `type: {kind}`: only the `{kind}:` block may be given"
                    ),
                );
            }
        }
    }

    fn no_placeholder(&mut self, path: &str, value: &str) {
        if value.contains("{{") {
            self.err(
                path,
                "variable values cannot contain placeholders; only entity fields and submodule \
                 overrides are templates",
            );
        }
    }

    /// Checks the placeholders of a template string: well-formed, naming defined variables,
    /// and no `{{ unset }}` (which only config overrides may hold).
    fn template(&mut self, path: &str, text: &str, ctx: &Ctx) {
        let (found, errors) = placeholder::scan(text);
        for e in errors {
            self.err(path, e);
        }
        let mut undefined = BTreeSet::new();
        let mut unset = false;
        for p in &found {
            match p.kind {
                Kind::Variable(name) if !ctx.variables.contains_key(name) => {
                    undefined.insert(name);
                }
                Kind::Variable(_) => {}
                Kind::Unset => unset = true,
            }
        }
        for name in undefined {
            self.err(path, undefined_message(name));
        }
        if unset {
            self.err(
                path,
                "`{{ unset }}` is only allowed as the whole value of a key inside configOverrides",
            );
        }
    }

    /// Checks a config overrides text: placeholders as in [`Self::template`] (with
    /// `{{ unset }}` allowed as a whole value when `allow_unset`), then the document shape
    /// with sample values, then that every known value of each variable keeps it valid.
    fn config_text(&mut self, path: &str, text: &str, ctx: &Ctx, allow_unset: bool) {
        let (found, errors) = placeholder::scan(text);
        let malformed = !errors.is_empty();
        for e in errors {
            self.err(path, e);
        }
        let mut undefined = BTreeSet::new();
        let mut unset_count = 0usize;
        for p in &found {
            match p.kind {
                Kind::Variable(name) if !ctx.variables.contains_key(name) => {
                    undefined.insert(name);
                }
                Kind::Variable(_) => {}
                Kind::Unset => unset_count += 1,
            }
        }
        for name in &undefined {
            self.err(path, undefined_message(name));
        }
        if unset_count > 0 && !allow_unset {
            self.err(
                path,
                "`{{ unset }}` is only allowed in configOverrides, not in installConfigOverrides",
            );
        }
        if malformed {
            return;
        }
        let sampled = match placeholder::substitute(text, &found, |n| ctx.sample(n)) {
            Ok(sampled) => sampled,
            Err(e) => return self.err(path, format!("with sample values: {e}")),
        };
        // Past the budget, said once (at the first text past it); later texts are not read.
        let Some(left) = self.sampled_left else {
            return;
        };
        self.sampled_left = left.checked_sub(sampled.len());
        if self.sampled_left.is_none() {
            return self.err(
                path,
                format!(
                    "module definition: its config texts with sample values in come to more \
                     than {MAX_FILLED_BYTES} bytes"
                ),
            );
        }
        match parse_document(&sampled) {
            Err(errs) => {
                for e in errs {
                    let at = e.line.zip(e.column);
                    self.err_in_text(path, e.message, at);
                }
                return;
            }
            Ok(doc) => {
                let whole: usize = doc.values().map(count_unset).sum();
                if allow_unset && whole != unset_count {
                    self.err(
                        path,
                        "`{{ unset }}` must be the whole value of a key, quoted: \
                         `key: \"{{ unset }}\"`",
                    );
                }
            }
        }
        self.value_trials(path, text, &found, ctx);
    }

    /// Checks that each known value of every variable `text` names (the others at their
    /// samples) still gives a valid document: at most [`MAX_VALUE_TRIALS`] of them, and none
    /// once the definition's trials parsed [`MAX_FILLED_BYTES`]; the first failure of each
    /// variable reported.
    fn value_trials(&mut self, path: &str, text: &str, found: &[Placeholder<'_>], ctx: &Ctx) {
        let mut budget = MAX_VALUE_TRIALS;
        for name in placeholder::variables(found) {
            let Some(var) = ctx.variables.get(name) else {
                continue;
            };
            for value in var.known_values() {
                if value == ctx.sample(name) {
                    continue;
                }
                if budget == 0 {
                    return;
                }
                budget -= 1;
                let text = placeholder::substitute(text, found, |n| {
                    if n == name {
                        value
                    } else {
                        ctx.sample(n)
                    }
                });
                // Past the budget, no more trials (like past `MAX_VALUE_TRIALS`).
                if let Ok(text) = &text {
                    match self.trials_left.checked_sub(text.len()) {
                        Some(left) => self.trials_left = left,
                        None => return,
                    }
                }
                let failed = match text {
                    Ok(text) => parse_document(&text).err().and_then(|errs| {
                        let first = errs.into_iter().next()?;
                        Some((first.message, first.line.zip(first.column)))
                    }),
                    Err(e) => Some((e.to_string(), None)),
                };
                if let Some((why, at)) = failed {
                    self.err_in_text(
                        path,
                        format!(
                            "with {name} = {} (one of its allowed values) this is not a valid \
                             config overrides document: {why}",
                            quote(value),
                        ),
                        at,
                    );
                    break;
                }
            }
        }
    }

    fn definition(&mut self, raw: RawDefinition, file_name: Option<&str>) -> ModuleDefinition {
        self.check_name(&raw.name, file_name);
        let variables = self.variables(raw.variables.unwrap_or_default());
        let samples = sample_values(&variables);
        let ctx = Ctx {
            variables: &variables,
            samples: &samples,
        };
        let entities: Vec<(usize, EntityTemplate)> = raw
            .entities
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .filter_map(|(i, e)| self.entity(i, e, &ctx).map(|t| (i, t)))
            .collect();
        self.duplicate_entities(&entities);
        let submodules = self.submodules(raw.submodules.unwrap_or_default(), &raw.name, &ctx);
        let restrictions = match raw.restrictions {
            None => Restrictions::default(),
            Some(r) => Restrictions {
                new_installations_allowed: r.new_installations.is_none_or(|n| n.allowed),
                allow_entity_overrides: r.submodule_usage.is_none_or(|s| s.allow_entity_overrides),
            },
        };
        ModuleDefinition {
            name: raw.name,
            display_name: raw.display_name,
            description: raw.description,
            variables,
            entities: entities.into_iter().map(|(_, e)| e).collect(),
            submodules,
            restrictions,
        }
    }

    fn check_name(&mut self, name: &str, file_name: Option<&str>) {
        if let Err(e) = validate_name("name", name) {
            self.err("name", reason(e));
            return;
        }
        let Some(file) = file_name else {
            return;
        };
        let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
        match base
            .strip_suffix(".yml")
            .or_else(|| base.strip_suffix(".yaml"))
        {
            None => self.err(
                "name",
                format!("the file name {} must end in .yml or .yaml", quote(base)),
            ),
            Some(stem) if stem != name => self.err(
                "name",
                format!(
                    "{} does not match the file name {}: expected {name}.yml or {name}.yaml",
                    quote(name),
                    quote(base)
                ),
            ),
            Some(_) => {}
        }
    }

    fn variables(&mut self, raw: BTreeMap<String, RawVariable>) -> BTreeMap<String, Variable> {
        let mut out = BTreeMap::new();
        for (name, rv) in raw {
            let path = format!("variables.{name}");
            if !is_variable_name(&name) {
                self.err(
                    &path,
                    format!(
                        "{} is not a valid variable name: a letter, then letters, digits, '_' \
                         or '-', at most {} characters",
                        quote(&name),
                        super::variable::MAX_VARIABLE_NAME_LEN
                    ),
                );
                continue;
            }
            let var = match (rv.kind.as_str(), rv.string, rv.options, rv.string_preset) {
                ("string", Some(s), None, None) => self.string_variable(&path, s),
                ("options", None, Some(o), None) => self.options_variable(&path, o),
                ("stringPreset", None, None, Some(p)) => {
                    for (key, value) in &p.mapping {
                        self.no_placeholder(&format!("{path}.stringPreset.mapping.{key}"), value);
                    }
                    Variable::StringPreset {
                        options: p.options,
                        mapping: p.mapping,
                        description: p.description,
                    }
                }
                (kind, s, o, p) => {
                    self.tagged_errors(
                        &path,
                        "variable",
                        kind,
                        &[
                            ("string", s.is_some()),
                            ("options", o.is_some()),
                            ("stringPreset", p.is_some()),
                        ],
                    );
                    continue;
                }
            };
            out.insert(name, var);
        }
        for (name, var) in &out {
            if let Variable::StringPreset {
                options, mapping, ..
            } = var
            {
                self.preset(name, options, mapping, &out);
            }
        }
        out
    }

    fn string_variable(&mut self, path: &str, s: RawStringVariable) -> Variable {
        let constraint = match s.constraint {
            None => Constraint::None,
            Some(c) => self.constraint(&format!("{path}.string.constraint"), c),
        };
        if let Some(default) = &s.default_value {
            let dpath = format!("{path}.string.defaultValue");
            self.no_placeholder(&dpath, default);
            if let Err(why) = constraint.check(default) {
                self.err(
                    dpath,
                    format!("the default value does not satisfy the constraint: {why}"),
                );
            }
        }
        Variable::String {
            default: s.default_value,
            description: s.description,
            constraint,
        }
    }

    /// A constraint; a broken one is reported and read as no constraint, so that it is not
    /// reported again through the default value.
    fn constraint(&mut self, path: &str, c: RawConstraint) -> Constraint {
        match (c.kind.as_str(), c.one_of, c.regex) {
            ("oneOf", Some(values), None) => {
                if values.is_empty() {
                    self.err(format!("{path}.oneOf"), "must list at least one value");
                    return Constraint::None;
                }
                for (i, v) in values.iter().enumerate() {
                    self.no_placeholder(&format!("{path}.oneOf[{i}]"), v);
                }
                Constraint::OneOf(values)
            }
            ("regex", None, Some(re)) => match anchored_regex(&re) {
                Ok(_) => Constraint::Regex(re),
                Err(e) => {
                    self.err(format!("{path}.regex"), e.to_string());
                    Constraint::None
                }
            },
            (kind, one_of, regex) => {
                self.tagged_errors(
                    path,
                    "constraint",
                    kind,
                    &[("oneOf", one_of.is_some()), ("regex", regex.is_some())],
                );
                Constraint::None
            }
        }
    }

    fn options_variable(&mut self, path: &str, o: RawOptionsVariable) -> Variable {
        let vpath = format!("{path}.options.values");
        if o.values.is_empty() {
            self.err(&vpath, "must list at least one value");
        }
        let mut seen = BTreeSet::new();
        for (i, v) in o.values.iter().enumerate() {
            self.no_placeholder(&format!("{vpath}[{i}]"), v);
            if !seen.insert(v.as_str()) {
                self.err(
                    format!("{vpath}[{i}]"),
                    format!("{} is listed twice", quote(v)),
                );
            }
        }
        if let Some(default) = &o.default_value {
            if !o.values.contains(default) {
                self.err(
                    format!("{path}.options.defaultValue"),
                    format!(
                        "{} is not one of the values {}",
                        quote(default),
                        list(o.values.iter().map(String::as_str))
                    ),
                );
            }
        }
        Variable::Options {
            values: o.values,
            default: o.default_value,
            description: o.description,
        }
    }

    fn preset(
        &mut self,
        name: &str,
        options: &str,
        mapping: &BTreeMap<String, String>,
        all: &BTreeMap<String, Variable>,
    ) {
        let path = format!("variables.{name}.stringPreset");
        let values = match all.get(options) {
            Some(Variable::Options { values, .. }) => values,
            Some(other) => {
                self.err(
                    format!("{path}.options"),
                    format!(
                        "{} is a {} variable; a stringPreset must name an options variable",
                        quote(options),
                        other.type_name()
                    ),
                );
                return;
            }
            None => {
                self.err(
                    format!("{path}.options"),
                    format!("{} is not a variable of this module", quote(options)),
                );
                return;
            }
        };
        let missing: Vec<&str> = values
            .iter()
            .filter(|v| !mapping.contains_key(*v))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            self.err(
                format!("{path}.mapping"),
                format!(
                    "no value for {} of options variable {options}: the mapping must cover \
                     every value",
                    list(missing)
                ),
            );
        }
        for key in mapping.keys() {
            if !values.contains(key) {
                self.err(
                    format!("{path}.mapping.{key}"),
                    format!(
                        "{} is not a value of options variable {options} (its values are {})",
                        quote(key),
                        list(values.iter().map(String::as_str))
                    ),
                );
            }
        }
    }

    // Long: every field of a module's entity template checked in turn, each problem reported
    // with its path.
    fn entity(&mut self, i: usize, re: RawEntity, ctx: &Ctx) -> Option<EntityTemplate> {
        let path = format!("entities[{i}]");
        let (kind, body) = match (re.kind.as_str(), re.helm_chart, re.terraform_module) {
            ("helmChart", Some(b), None) => (EntityKind::HelmChart, b),
            ("terraformModule", None, Some(b)) => (EntityKind::TerraformModule, b),
            (kind, h, t) => {
                self.tagged_errors(
                    &path,
                    "entity",
                    kind,
                    &[("helmChart", h.is_some()), ("terraformModule", t.is_some())],
                );
                return None;
            }
        };
        let base = format!("{path}.{kind}");
        let f = |field: &str| format!("{base}.{field}");

        self.literal_or_template(&f("productId"), &body.product_id, ctx, |s| {
            validate_product_id("productId", s)
        });
        match (kind, &body.k8s_namespace) {
            (EntityKind::HelmChart, None) => self.err(f("k8sNamespace"), "required"),
            (EntityKind::HelmChart, Some(ns)) => {
                self.literal_or_template(&f("k8sNamespace"), ns, ctx, |s| {
                    validate_name("k8sNamespace", s)
                })
            }
            (EntityKind::TerraformModule, Some(_)) => self.err(
                f("k8sNamespace"),
                "not allowed for terraformModule entities: only helm charts have a namespace",
            ),
            (EntityKind::TerraformModule, None) => {}
        }
        match (kind, &body.account_id) {
            (EntityKind::HelmChart, Some(_)) => self.err(
                f("accountId"),
                "not allowed for helmChart entities: only terraform modules have an account",
            ),
            (_, Some(account)) => self.template(&f("accountId"), account, ctx),
            (_, None) => {}
        }
        if let Some(name) = &body.entity_name {
            self.literal_or_template(&f("entityName"), name, ctx, |s| {
                validate_name("entityName", s)
            });
        }
        let dependency_groups = body.dependency_groups.unwrap_or_default();
        for (j, g) in dependency_groups.iter().enumerate() {
            self.group(&f(&format!("dependencyGroups[{j}]")), g, ctx);
        }
        let dependency_group_overrides = body.dependency_group_overrides.unwrap_or_default();
        for (product, groups) in &dependency_group_overrides {
            let p = f(&format!("dependencyGroupOverrides.{product}"));
            self.literal_or_template(&p, product, ctx, |s| validate_product_id("productId", s));
            for (j, g) in groups.iter().enumerate() {
                self.group(&format!("{p}[{j}]"), g, ctx);
            }
        }
        let sync = match body.sync_config_overrides {
            None | Some(RawSyncMode::Enabled) => SyncMode::Enabled,
            Some(RawSyncMode::Merge) => SyncMode::Merge,
            Some(RawSyncMode::Disabled) => SyncMode::Disabled,
        };
        if let Some(text) = &body.config_overrides {
            self.config_text(&f("configOverrides"), text, ctx, true);
        }
        if let Some(text) = &body.install_config_overrides {
            if sync != SyncMode::Merge {
                self.err(
                    f("installConfigOverrides"),
                    format!(
                        "only allowed with syncConfigOverrides: MERGE (this entity uses {})",
                        sync.as_str()
                    ),
                );
            }
            self.config_text(&f("installConfigOverrides"), text, ctx, false);
        }
        let secret_requirements =
            self.secrets(&f("secretRequirements"), body.secret_requirements, ctx);
        let marked_for_uninstallation = self.uninstall(
            &f("markedForUninstallation"),
            body.marked_for_uninstallation,
            ctx,
        );
        Some(EntityTemplate {
            kind,
            product_id: body.product_id,
            k8s_namespace: body.k8s_namespace,
            account_id: body.account_id,
            entity_name: body.entity_name,
            dependency_groups,
            dependency_group_overrides,
            sync_config_overrides: sync,
            config_overrides: body.config_overrides,
            install_config_overrides: body.install_config_overrides,
            secret_requirements,
            marked_for_uninstallation,
        })
    }

    /// A template; when it holds no placeholder, also `check`ed as the literal it is.
    fn literal_or_template(
        &mut self,
        path: &str,
        text: &str,
        ctx: &Ctx,
        check: impl FnOnce(&str) -> Result<(), CommandError>,
    ) {
        if text.contains("{{") {
            self.template(path, text, ctx);
        } else if let Err(e) = check(text) {
            self.err(path, reason(e));
        }
    }

    fn group(&mut self, path: &str, group: &str, ctx: &Ctx) {
        if group.trim().is_empty() {
            self.err(path, "a dependency group must not be empty");
        } else {
            self.template(path, group, ctx);
        }
    }

    fn secrets(
        &mut self,
        path: &str,
        raw: Option<BTreeMap<String, RawSecret>>,
        ctx: &Ctx,
    ) -> BTreeMap<String, MultikeySecret> {
        let mut out = BTreeMap::new();
        for (name, secret) in raw.unwrap_or_default() {
            let p = format!("{path}.{name}");
            self.template(&p, &name, ctx);
            match (secret.kind.as_str(), secret.multikey) {
                ("multikey", Some(m)) => {
                    let kpath = format!("{p}.multikey.keys");
                    if m.keys.is_empty() {
                        self.err(&kpath, "must list at least one key");
                    }
                    let mut seen = BTreeSet::new();
                    for (i, k) in m.keys.iter().enumerate() {
                        self.template(&format!("{kpath}[{i}]"), k, ctx);
                        if !seen.insert(k.as_str()) {
                            self.err(
                                format!("{kpath}[{i}]"),
                                format!("{} is listed twice", quote(k)),
                            );
                        }
                    }
                    if let Some(d) = &m.description {
                        self.template(&format!("{p}.multikey.description"), d, ctx);
                    }
                    out.insert(
                        name,
                        MultikeySecret {
                            description: m.description,
                            keys: m.keys,
                        },
                    );
                }
                (kind, m) => {
                    self.tagged_errors(&p, "secret", kind, &[("multikey", m.is_some())]);
                }
            }
        }
        out
    }

    fn uninstall(&mut self, path: &str, raw: Option<RawUninstall>, ctx: &Ctx) -> Option<Uninstall> {
        let Some(u) = raw else {
            if self.index.get(path).is_some() {
                self.err(
                    path,
                    "must be a mapping: write `markedForUninstallation: {}` to uninstall",
                );
            }
            return None;
        };
        let min_version = u.min_version.and_then(|text| match Version::parse(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(
                    format!("{path}.minVersion"),
                    format!("{} is not a semantic version: {e}", quote(&text)),
                );
                None
            }
        });
        if let Some(unmanage) = &u.unmanage_after_uninstall {
            let field = format!("{path}.unmanageAfterUninstall");
            self.template(&field, unmanage, ctx);
            // A templated value is checked once rendered.
            if !unmanage.contains("{{") && UnmanageAfterUninstall::parse(unmanage).is_none() {
                self.err(&field, UnmanageAfterUninstall::refusal(unmanage));
            }
        }
        Some(Uninstall {
            min_version,
            unmanage_after_uninstall: u.unmanage_after_uninstall,
        })
    }

    fn duplicate_entities(&mut self, entities: &[(usize, EntityTemplate)]) {
        let mut seen: HashMap<(EntityKind, &str), usize> = HashMap::new();
        for (i, e) in entities {
            let name = e.name_template();
            if name.contains("{{") {
                continue;
            }
            if let Some(first) = seen.get(&(e.kind, name)) {
                self.err(
                    format!("entities[{i}]"),
                    format!(
                        "duplicate entity: {} {} is already defined by entities[{first}]; give \
                         one of them another entityName",
                        e.kind,
                        quote(name)
                    ),
                );
            } else {
                seen.insert((e.kind, name), *i);
            }
        }
    }

    fn submodules(
        &mut self,
        raw: Vec<RawSubmodule>,
        own_name: &str,
        ctx: &Ctx,
    ) -> Vec<SubmoduleRef> {
        let mut out = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, rs) in raw.into_iter().enumerate() {
            let path = format!("submodules[{i}]");
            let npath = format!("{path}.name");
            if let Err(e) = validate_name("name", &rs.name) {
                self.err(&npath, reason(e));
            } else if rs.name == own_name {
                self.err(&npath, "a module cannot list itself as a submodule");
            } else if let Some(first) = seen.get(&rs.name) {
                self.err(
                    &npath,
                    format!(
                        "{} is listed twice (first at submodules[{first}])",
                        quote(&rs.name)
                    ),
                );
            } else {
                seen.insert(rs.name.clone(), i);
            }
            let version = match Version::parse(&rs.version) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.err(
                        format!("{path}.version"),
                        format!(
                            "{} is not a semantic version (submodules are included at an exact \
                             version, e.g. 0.3.0): {e}",
                            quote(&rs.version)
                        ),
                    );
                    None
                }
            };
            let variable_overrides = rs.variable_overrides.unwrap_or_default();
            for (name, value) in &variable_overrides {
                let p = format!("{path}.variableOverrides.{name}");
                if is_variable_name(name) {
                    self.template(&p, value, ctx);
                } else {
                    self.err(p, format!("{} is not a valid variable name", quote(name)));
                }
            }
            let mut entity_overrides = BTreeMap::new();
            for (product, ro) in rs.entity_overrides.unwrap_or_default() {
                let p = format!("{path}.entityOverrides.{product}");
                if let Err(e) = validate_product_id("productId", &product) {
                    self.err(&p, reason(e));
                }
                let o = self.entity_override(&p, ro, ctx);
                entity_overrides.insert(product, o);
            }
            if let Some(version) = version {
                out.push(SubmoduleRef {
                    name: rs.name,
                    version,
                    variable_overrides,
                    entity_overrides,
                });
            }
        }
        out
    }

    fn entity_override(&mut self, path: &str, ro: RawEntityOverride, ctx: &Ctx) -> EntityOverride {
        if let Some(text) = &ro.config_overrides {
            self.config_text(&format!("{path}.configOverrides"), text, ctx, true);
        }
        let secret_requirements = self.secrets(
            &format!("{path}.secretRequirements"),
            ro.secret_requirements,
            ctx,
        );
        let ignored_dependencies = ro.ignored_dependencies.unwrap_or_default();
        for (i, d) in ignored_dependencies.iter().enumerate() {
            self.literal_or_template(&format!("{path}.ignoredDependencies[{i}]"), d, ctx, |s| {
                validate_product_id("productId", s)
            });
        }
        if let Some(groups) = &ro.dependency_groups {
            for (i, g) in groups.iter().enumerate() {
                self.group(&format!("{path}.dependencyGroups[{i}]"), g, ctx);
            }
        }
        EntityOverride {
            config_overrides: ro.config_overrides,
            secret_requirements,
            ignored_dependencies,
            dependency_groups: ro.dependency_groups,
        }
    }
}

fn undefined_message(name: &str) -> String {
    format!(
        "`{{{{ moduleVariable.{name} }}}}` refers to an undefined variable {}; define it under \
         `variables`",
        quote(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name: m\n";

    fn errors(yaml: &str) -> Vec<String> {
        parse_definition(None, yaml)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn minimal_definition() {
        let def = parse_definition(Some("dir/m.yml"), MINIMAL).unwrap();
        assert_eq!(def.name, "m");
        assert_eq!(def.restrictions, Restrictions::default());
        assert!(parse_definition(Some("m.yaml"), MINIMAL).is_ok());
        let errs = parse_definition(Some("m.json"), MINIMAL).unwrap_err();
        assert!(errs.first().message.contains("must end in .yml or .yaml"));
    }

    #[test]
    fn serde_errors_keep_path_and_location() {
        assert_eq!(
            errors("name: m\nentities:\n  - type: helmChart\n    helmChart:\n      productId: g:p\n      k8sNamespace: ns\n      namespace: x\n")[0],
            "entities[0].helmChart.namespace: unknown field `namespace`, expected one of \
             `productId`, `k8sNamespace`, `accountId`, `entityName`, `dependencyGroups`, \
             `dependencyGroupOverrides`, `syncConfigOverrides`, `configOverrides`, \
             `installConfigOverrides`, `secretRequirements`, `markedForUninstallation` \
             (line 7, column 7)"
        );
        assert_eq!(
            errors("displayName: x\n")[0],
            "name: missing field `name` (line 1, column 1)"
        );
        assert_eq!(
            errors("name: m\nrestrictions:\n  newInstallations:\n    allowed: maybe\n")[0],
            "restrictions.newInstallations.allowed: invalid type: string \"maybe\", expected a \
             boolean (line 4, column 14)"
        );
    }

    #[test]
    fn all_semantic_errors_are_collected() {
        let yaml = "\
name: m
variables:
  a:
    type: options
    options:
      values: []
  b:
    type: string
    string:
      defaultValue: heap-3g
      constraint:
        type: regex
        regex: '\\d+[kmg]'
entities:
  - type: helmChart
    helmChart:
      productId: g:p
  - type: terraformModule
    terraformModule:
      productId: g:q
      k8sNamespace: ns
";
        let errs = errors(yaml);
        assert_eq!(errs.len(), 4, "{errs:#?}");
        assert_eq!(
            errs[0],
            "variables.a.options.values: must list at least one value (line 6, column 7)"
        );
        assert!(errs[1]
            .starts_with("variables.b.string.defaultValue: the default value does not satisfy"));
        assert_eq!(
            errs[2],
            "entities[0].helmChart.k8sNamespace: required (line 16, column 5)"
        );
        assert!(errs[3].starts_with("entities[1].terraformModule.k8sNamespace: not allowed"));
    }

    #[test]
    fn config_errors_point_into_the_block() {
        let yaml = "\
name: m
entities:
  - type: helmChart
    helmChart:
      productId: g:p
      k8sNamespace: ns
      configOverrides: |
        \"1.0.0\":
          overrides:
            a: b: c
";
        let errs = parse_definition(None, yaml).unwrap_err();
        let e = errs.first();
        assert_eq!(e.path, "entities[0].helmChart.configOverrides");
        assert!(e.message.starts_with("invalid YAML: mapping values"), "{e}");
        assert_eq!((e.line, e.column), (Some(10), Some(17)));
    }
    /// Tiny deterministic generator (SplitMix64).
    struct SplitMix64(u64);

    impl SplitMix64 {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn no_panic_on_mutated_definitions() {
        // Mutations of the seed's database module (config text, placeholders, structure):
        // parsing and rendering either succeed or report errors, never panic, and every
        // error names a line.
        const SEED: &str = include_str!("../../tests/fixtures/modules/valid/database-module.yml");
        const ALPHABET: &[u8] = b" \n\t:-[]{},&*!|>'\"#%@`?.x019abc{}\\";
        let catalog: BTreeMap<(String, Version), ModuleDefinition> = BTreeMap::new();
        let values: BTreeMap<String, String> =
            [("postgresMaxConnections".to_string(), "100".to_string())].into();
        let mut rng = SplitMix64(0x5EED_0D01);
        let mut oks = 0;
        for _ in 0..600 {
            let mut bytes = SEED.as_bytes().to_vec();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(bytes.len() + 1);
                let c = ALPHABET[rng.below(ALPHABET.len())];
                match rng.below(3) {
                    0 if at < bytes.len() => bytes[at] = c,
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, c),
                }
            }
            match parse_definition(None, &String::from_utf8_lossy(&bytes)) {
                Ok(def) => {
                    oks += 1;
                    let _ = crate::module::render(&def, &catalog, &values);
                }
                Err(errs) => {
                    for e in &errs {
                        assert!(e.line.is_some(), "{e}");
                    }
                }
            }
        }
        assert!(oks > 0 && oks < 600, "{oks}");
    }
}
