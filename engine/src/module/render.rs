//! Rendering (SPEC M2, M3, M6, M9): a module definition plus installer values gives the
//! concrete entities it manages, submodules included, every placeholder substituted.
//!
//! Installer values name the module's own `string` and `options` variables; a `stringPreset`
//! follows its options variable and cannot be set. A submodule's variable that the parent does
//! not override is given as `<submodule>.<variable>` (`a.b.c` two levels down). Every
//! required variable without a value is reported at once ([`RenderError::MissingVariables`]).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use semver::Version;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Mapping;

use super::catalog::{ModuleCatalog, MAX_SUBMODULE_DEPTH};
use super::config::{finalize, merge, parse_document, ModuleConfig};
use super::definition::{
    product_name, EntityOverride, EntityTemplate, ModuleDefinition, MultikeySecret, SubmoduleRef,
    SyncMode, Uninstall, UnmanageAfterUninstall,
};
use super::error::quote;
use super::placeholder::{self, Kind};
use super::variable::{sample_values, Variable};
use crate::entity::EntityKind;
use crate::name::{validate_name, validate_product_id};

/// One entity as a module installation manages it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedEntity {
    /// Helm chart or Terraform module.
    pub kind: EntityKind,
    /// `group:name` of the product.
    pub product_id: String,
    /// `entityName`, or the product name (after `:`) when none was given.
    pub entity_name: String,
    /// Kubernetes namespace (helm charts).
    pub k8s_namespace: Option<String>,
    /// Installation account (terraform modules).
    pub account_id: Option<String>,
    /// Dependency groups; empty means the default group.
    pub dependency_groups: Vec<String>,
    /// Per depended-on product id, the groups its provider is looked up in.
    pub dependency_group_overrides: BTreeMap<String, Vec<String>>,
    /// Product ids whose dependency checks the entity skips (from a parent's
    /// `entityOverrides`).
    pub ignored_dependencies: Vec<String>,
    /// How the module's config overrides meet the entity's (SPEC M13).
    pub sync_mode: SyncMode,
    /// The module's config overrides, by version key.
    pub config_overrides: BTreeMap<Version, ModuleConfig>,
    /// Overrides applied only when the entity is created (MERGE only), by version key.
    pub install_config_overrides: BTreeMap<Version, ModuleConfig>,
    /// Secrets the entity needs, by name.
    pub secret_requirements: BTreeMap<String, MultikeySecret>,
    /// Set when the module asks for the entity's uninstallation.
    pub marked_for_uninstallation: Option<Uninstall>,
    /// The module defining the entity: `control-plane-module`, or `parent/sub` for a
    /// submodule's.
    pub source_module: String,
}

/// Why a module could not be rendered with the given values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// Required variables (no default) without a value, all of them, as installers name
    /// them (`postgresMaxConnections`, `database-module.postgresMaxConnections`).
    #[error("values are required for variables without a default: {}", .0.join(", "))]
    MissingVariables(Vec<String>),
    /// A value names no variable of the module (or of a submodule).
    #[error("{0:?} is not a variable of the module")]
    UnknownVariable(String),
    /// A value was given for a `stringPreset`.
    #[error(
        "{variable} is a stringPreset and cannot be set directly; choose a value of {options}"
    )]
    PresetNotSettable {
        /// The preset, as installers name it.
        variable: String,
        /// The options variable that selects its value.
        options: String,
    },
    /// A value is not acceptable for its variable.
    #[error("variable {variable}: {reason}")]
    InvalidValue {
        /// The variable, as installers name it.
        variable: String,
        /// Why.
        reason: String,
    },
    /// A submodule version is not in the catalog.
    #[error("module {module}: submodule {name} {version} is not published")]
    MissingSubmodule {
        /// The including module.
        module: String,
        /// The submodule's name.
        name: String,
        /// The version asked for.
        version: Version,
    },
    /// Submodules include each other, or nest deeper than the limit.
    #[error("submodule cycle or nesting too deep: {0}")]
    Cycle(String),
    /// A substituted entity field is unacceptable.
    #[error("module {module}, entity {product_id}: {field}: {reason}")]
    InvalidEntity {
        /// The module defining the entity (`parent/sub`).
        module: String,
        /// The entity's product id as written in the definition.
        product_id: String,
        /// The field, as spelled in YAML.
        field: String,
        /// Why.
        reason: String,
    },
    /// Config overrides are not a valid document once the values are substituted.
    #[error("module {module}, entity {product_id}: {field}: {}{reason}", culprit(.variable))]
    InvalidConfig {
        /// The module defining the entity (`parent/sub`).
        module: String,
        /// The entity's product id as written in the definition.
        product_id: String,
        /// `configOverrides`, `installConfigOverrides`, or `entityOverrides.configOverrides`.
        field: String,
        /// The variable whose value breaks the document, when one alone does.
        variable: Option<String>,
        /// Why.
        reason: String,
    },
    /// Two rendered entities have the same kind and name.
    #[error("{kind} {name} is defined twice: by {first} and by {second}")]
    DuplicateEntity {
        /// Their kind.
        kind: EntityKind,
        /// Their entity name.
        name: String,
        /// The first defining module.
        first: String,
        /// The second defining module.
        second: String,
    },
}

fn culprit(variable: &Option<String>) -> String {
    match variable {
        Some(v) => format!("the value of variable {v} makes it invalid: "),
        None => String::new(),
    }
}

/// A module with its variable values resolved, and its submodules'.
struct Resolved<'a> {
    def: &'a ModuleDefinition,
    /// How installers name this module's variables: `` or `sub.`.
    prefix: String,
    /// `module` or `parent/sub`.
    source: String,
    /// Every variable with a value, presets included.
    values: BTreeMap<String, String>,
    subs: Vec<(&'a SubmoduleRef, Resolved<'a>)>,
    /// What the render's config texts may still add up to ([`MAX_RENDERED_BYTES`]).
    filled_left: &'a Cell<usize>,
}

/// Most bytes of config text, placeholders filled in, one render produces (a module with its
/// submodules, for one installation): a value repeats wherever a placeholder names it, and
/// what a render produces is stored in the state. A render past it is refused.
pub const MAX_RENDERED_BYTES: usize = 4 << 20;

/// Renders `def` with installer `values` (see the module docs for how they are named).
pub fn render(
    def: &ModuleDefinition,
    catalog: &dyn ModuleCatalog,
    values: &BTreeMap<String, String>,
) -> Result<Vec<RenderedEntity>, RenderError> {
    let filled_left = Cell::new(MAX_RENDERED_BYTES);
    let mut walk = Walk {
        catalog,
        chain: vec![def.name.clone()],
        missing: Vec::new(),
        filled_left: &filled_left,
    };
    let at = Place {
        prefix: String::new(),
        source: def.name.clone(),
    };
    let resolved = resolve(&mut walk, def, values, at, &BTreeSet::new())?;
    if !walk.missing.is_empty() {
        return Err(RenderError::MissingVariables(walk.missing));
    }
    let mut out = Vec::new();
    emit(&resolved, None, &mut out)?;
    let mut seen: HashMap<(EntityKind, &str), &str> = HashMap::new();
    for e in &out {
        if let Some(first) = seen.insert((e.kind, &e.entity_name), &e.source_module) {
            return Err(RenderError::DuplicateEntity {
                kind: e.kind,
                name: e.entity_name.clone(),
                first: first.to_string(),
                second: e.source_module.clone(),
            });
        }
    }
    Ok(out)
}

/// What one render carries through the whole walk of a module and its submodules.
struct Walk<'a> {
    /// Where submodule definitions come from.
    catalog: &'a dyn ModuleCatalog,
    /// The modules from the root down to the one being resolved (to refuse cycles).
    chain: Vec<String>,
    /// Every variable without a value, by full name.
    missing: Vec<String>,
    /// What the render's config texts may still add up to.
    filled_left: &'a Cell<usize>,
}

/// Where in the walk a module is.
struct Place {
    /// The variable-name prefix of its variables (`sub.` for a submodule `sub`).
    prefix: String,
    /// The module path for messages (`root/sub`).
    source: String,
}

/// Resolves the values of `def`'s variables and, recursively, its submodules'. Variables in
/// `assumed` get their value from an override that could not be resolved because a parent
/// variable is missing: they are not reported again.
// Long: the variable resolution rules (override, default, parent, missing) in precedence order,
// recursing into submodules.
fn resolve<'a>(
    walk: &mut Walk<'a>,
    def: &'a ModuleDefinition,
    given: &BTreeMap<String, String>,
    at: Place,
    assumed: &BTreeSet<String>,
) -> Result<Resolved<'a>, RenderError> {
    let Place { prefix, source } = at;
    let mut own: BTreeMap<&str, &str> = BTreeMap::new();
    let mut per_sub: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    for (key, value) in given {
        match key.split_once('.') {
            Some((sub, rest)) if def.submodules.iter().any(|s| s.name == sub) => {
                per_sub
                    .entry(sub)
                    .or_default()
                    .insert(rest.to_string(), value.clone());
            }
            Some(_) => return Err(RenderError::UnknownVariable(format!("{prefix}{key}"))),
            None => match def.variables.get(key) {
                None => return Err(RenderError::UnknownVariable(format!("{prefix}{key}"))),
                Some(Variable::StringPreset { options, .. }) => {
                    return Err(RenderError::PresetNotSettable {
                        variable: format!("{prefix}{key}"),
                        options: format!("{prefix}{options}"),
                    })
                }
                Some(_) => {
                    own.insert(key, value);
                }
            },
        }
    }
    let mut values = BTreeMap::new();
    for (name, var) in &def.variables {
        if matches!(var, Variable::StringPreset { .. }) {
            continue;
        }
        match own.get(name.as_str()).copied().or(var.default_value()) {
            Some(value) => {
                var.check_value(value)
                    .map_err(|e| RenderError::InvalidValue {
                        variable: format!("{prefix}{name}"),
                        reason: e.to_string(),
                    })?;
                values.insert(name.clone(), value.to_string());
            }
            None if assumed.contains(name) => {}
            None => walk.missing.push(format!("{prefix}{name}")),
        }
    }
    for (name, var) in &def.variables {
        if let Variable::StringPreset {
            options, mapping, ..
        } = var
        {
            if let Some(chosen) = values.get(options) {
                let value = mapping
                    .get(chosen)
                    .ok_or_else(|| RenderError::InvalidValue {
                        variable: format!("{prefix}{name}"),
                        reason: format!("the preset has no value for {options} = {chosen}"),
                    })?
                    .clone();
                values.insert(name.clone(), value);
            }
        }
    }
    let mut subs = Vec::new();
    for sref in &def.submodules {
        if walk.chain.contains(&sref.name) || walk.chain.len() >= MAX_SUBMODULE_DEPTH {
            return Err(RenderError::Cycle(format!(
                "{} → {}",
                walk.chain.join(" → "),
                sref.name
            )));
        }
        let sd = walk
            .catalog
            .definition(&sref.name, &sref.version)
            .ok_or_else(|| RenderError::MissingSubmodule {
                module: source.clone(),
                name: sref.name.clone(),
                version: sref.version.clone(),
            })?;
        let sub_prefix = format!("{prefix}{}.", sref.name);
        let mut sub_given = per_sub.remove(sref.name.as_str()).unwrap_or_default();
        let mut sub_assumed = BTreeSet::new();
        for (var, template) in &sref.variable_overrides {
            if sub_given.contains_key(var) {
                return Err(RenderError::InvalidValue {
                    variable: format!("{sub_prefix}{var}"),
                    reason: "it is set by the parent module's variableOverrides and cannot be \
                             given at installation"
                        .to_string(),
                });
            }
            match fill(template, &values) {
                Ok(value) => {
                    sub_given.insert(var.clone(), value);
                }
                Err(Unfilled::Missing(_)) => {
                    sub_assumed.insert(var.clone());
                }
                Err(Unfilled::Invalid(reason)) => {
                    return Err(RenderError::InvalidValue {
                        variable: format!("{sub_prefix}{var}"),
                        reason,
                    })
                }
            }
        }
        walk.chain.push(sref.name.clone());
        let sub_at = Place {
            prefix: sub_prefix,
            source: format!("{source}/{}", sref.name),
        };
        let r = resolve(walk, sd, &sub_given, sub_at, &sub_assumed)?;
        walk.chain.pop();
        subs.push((sref, r));
    }
    Ok(Resolved {
        def,
        prefix,
        source,
        values,
        subs,
        filled_left: walk.filled_left,
    })
}

/// Why a template could not be filled.
enum Unfilled {
    /// A referenced variable has no value.
    Missing(String),
    /// The template is malformed.
    Invalid(String),
}

/// `text` with its placeholders replaced by `values`.
fn fill(text: &str, values: &BTreeMap<String, String>) -> Result<String, Unfilled> {
    let (found, errors) = placeholder::scan(text);
    if let Some(e) = errors.into_iter().next() {
        return Err(Unfilled::Invalid(e));
    }
    for p in &found {
        match p.kind {
            Kind::Variable(name) if !values.contains_key(name) => {
                return Err(Unfilled::Missing(name.to_string()))
            }
            Kind::Variable(_) => {}
            Kind::Unset => {
                return Err(Unfilled::Invalid(
                    "`{{ unset }}` is only allowed inside configOverrides".to_string(),
                ))
            }
        }
    }
    placeholder::substitute(text, &found, |n| values.get(n).map_or("", String::as_str))
        .map_err(|e| Unfilled::Invalid(e.to_string()))
}

/// An entity being rendered: config maps stay raw (unset values in) until overrides from the
/// parent are merged.
struct Draft {
    entity: RenderedEntity,
    config: BTreeMap<Version, Mapping>,
    install: BTreeMap<Version, Mapping>,
}

/// A parent's `entityOverrides` for a submodule, with what is needed to fill them.
struct ParentOverrides<'a> {
    overrides: &'a BTreeMap<String, EntityOverride>,
    parent: &'a Resolved<'a>,
}

fn emit(
    r: &Resolved<'_>,
    parent: Option<ParentOverrides<'_>>,
    out: &mut Vec<RenderedEntity>,
) -> Result<(), RenderError> {
    for template in &r.def.entities {
        let mut draft = draft(template, r)?;
        if let Some(p) = &parent {
            if let Some(o) = p.overrides.get(&template.product_id) {
                apply_override(&mut draft, o, p.parent, &template.product_id, &r.source)?;
            }
        }
        let finalize_all = |m: BTreeMap<Version, Mapping>, field: &str| {
            m.into_iter()
                .map(|(v, raw)| {
                    finalize(&r.source, raw).map(|c| (v, c)).map_err(|e| {
                        RenderError::InvalidConfig {
                            module: r.source.clone(),
                            product_id: template.product_id.clone(),
                            field: field.to_string(),
                            variable: None,
                            reason: e.to_string(),
                        }
                    })
                })
                .collect::<Result<BTreeMap<_, _>, _>>()
        };
        let mut entity = draft.entity;
        entity.config_overrides = finalize_all(draft.config, "configOverrides")?;
        entity.install_config_overrides = finalize_all(draft.install, "installConfigOverrides")?;
        out.push(entity);
    }
    for (sref, sub) in &r.subs {
        emit(
            sub,
            Some(ParentOverrides {
                overrides: &sref.entity_overrides,
                parent: r,
            }),
            out,
        )?;
    }
    Ok(())
}

fn draft(t: &EntityTemplate, r: &Resolved<'_>) -> Result<Draft, RenderError> {
    let invalid = |field: &str, reason: String| RenderError::InvalidEntity {
        module: r.source.clone(),
        product_id: t.product_id.clone(),
        field: field.to_string(),
        reason,
    };
    let fill_field = |field: &str, text: &str| {
        fill(text, &r.values).map_err(|e| match e {
            Unfilled::Missing(name) => {
                invalid(field, format!("variable {}{name} has no value", r.prefix))
            }
            Unfilled::Invalid(reason) => invalid(field, reason),
        })
    };
    let product_id = fill_field("productId", &t.product_id)?;
    validate_product_id("productId", &product_id)
        .map_err(|e| invalid("productId", e.to_string()))?;
    let k8s_namespace = match &t.k8s_namespace {
        Some(ns) => {
            let ns = fill_field("k8sNamespace", ns)?;
            validate_name("k8sNamespace", &ns)
                .map_err(|e| invalid("k8sNamespace", e.to_string()))?;
            Some(ns)
        }
        None => None,
    };
    let account_id = t
        .account_id
        .as_deref()
        .map(|a| fill_field("accountId", a))
        .transpose()?;
    let entity_name = match &t.entity_name {
        Some(name) => fill_field("entityName", name)?,
        None => product_name(&product_id).to_string(),
    };
    validate_name("entityName", &entity_name).map_err(|e| invalid("entityName", e.to_string()))?;
    let dependency_groups = t
        .dependency_groups
        .iter()
        .map(|g| fill_field("dependencyGroups", g))
        .collect::<Result<Vec<_>, _>>()?;
    let mut dependency_group_overrides = BTreeMap::new();
    for (product, groups) in &t.dependency_group_overrides {
        let product = fill_field("dependencyGroupOverrides", product)?;
        let groups = groups
            .iter()
            .map(|g| fill_field("dependencyGroupOverrides", g))
            .collect::<Result<Vec<_>, _>>()?;
        dependency_group_overrides.insert(product, groups);
    }
    let secret_requirements = fill_secrets(&t.secret_requirements, |text| {
        fill_field("secretRequirements", text)
    })?;
    let marked_for_uninstallation = t
        .marked_for_uninstallation
        .as_ref()
        .map(|u| rendered_uninstall(u, &fill_field, &invalid))
        .transpose()?;
    let config = match &t.config_overrides {
        Some(text) => config_document(text, r, &t.product_id, "configOverrides")?,
        None => BTreeMap::new(),
    };
    let install = match &t.install_config_overrides {
        Some(text) => config_document(text, r, &t.product_id, "installConfigOverrides")?,
        None => BTreeMap::new(),
    };
    Ok(Draft {
        entity: RenderedEntity {
            kind: t.kind,
            product_id,
            entity_name,
            k8s_namespace,
            account_id,
            dependency_groups,
            dependency_group_overrides,
            ignored_dependencies: Vec::new(),
            sync_mode: t.sync_config_overrides,
            config_overrides: BTreeMap::new(),
            install_config_overrides: BTreeMap::new(),
            secret_requirements,
            marked_for_uninstallation,
            source_module: r.source.clone(),
        },
        config,
        install,
    })
}

/// `markedForUninstallation` rendered: `unmanageAfterUninstall` filled and checked.
fn rendered_uninstall(
    u: &Uninstall,
    fill_field: &dyn Fn(&str, &str) -> Result<String, RenderError>,
    invalid: &dyn Fn(&str, String) -> RenderError,
) -> Result<Uninstall, RenderError> {
    let field = "markedForUninstallation.unmanageAfterUninstall";
    let unmanage_after_uninstall = match u.unmanage_after_uninstall.as_deref() {
        Some(m) => {
            let value = fill_field(field, m)?;
            if UnmanageAfterUninstall::parse(&value).is_none() {
                return Err(invalid(field, UnmanageAfterUninstall::refusal(&value)));
            }
            Some(value)
        }
        None => None,
    };
    Ok(Uninstall {
        min_version: u.min_version.clone(),
        unmanage_after_uninstall,
    })
}

fn fill_secrets(
    secrets: &BTreeMap<String, MultikeySecret>,
    mut fill_text: impl FnMut(&str) -> Result<String, RenderError>,
) -> Result<BTreeMap<String, MultikeySecret>, RenderError> {
    let mut out = BTreeMap::new();
    for (name, s) in secrets {
        let secret = MultikeySecret {
            description: s.description.as_deref().map(&mut fill_text).transpose()?,
            keys: s
                .keys
                .iter()
                .map(|k| fill_text(k))
                .collect::<Result<Vec<_>, _>>()?,
        };
        out.insert(fill_text(name)?, secret);
    }
    Ok(out)
}

/// Substitutes `r`'s values into a config overrides text and parses it. When the result is
/// not a valid document, names the variable whose value alone breaks it, if one does.
fn config_document(
    text: &str,
    r: &Resolved<'_>,
    product_id: &str,
    field: &str,
) -> Result<BTreeMap<Version, Mapping>, RenderError> {
    let fail = |variable: Option<String>, reason: String| RenderError::InvalidConfig {
        module: r.source.clone(),
        product_id: product_id.to_string(),
        field: field.to_string(),
        variable,
        reason,
    };
    let (found, errors) = placeholder::scan(text);
    if let Some(e) = errors.into_iter().next() {
        return Err(fail(None, e));
    }
    let referenced = placeholder::variables(&found);
    if let Some(name) = referenced.iter().find(|n| !r.values.contains_key(**n)) {
        return Err(fail(
            Some(format!("{}{name}", r.prefix)),
            "the variable has no value".to_string(),
        ));
    }
    let value = |n: &str| r.values.get(n).map_or("", String::as_str);
    let full =
        placeholder::substitute(text, &found, value).map_err(|e| fail(None, e.to_string()))?;
    match r.filled_left.get().checked_sub(full.len()) {
        Some(left) => r.filled_left.set(left),
        None => {
            return Err(fail(
                None,
                format!(
                    "the config texts of this installation, filled in, come to more than \
                     {MAX_RENDERED_BYTES} bytes"
                ),
            ))
        }
    }
    match parse_document(&full) {
        Ok(doc) => Ok(doc),
        Err(errs) => {
            let samples = sample_values(&r.def.variables);
            let sample = |n: &str| samples.get(n).map_or("x", String::as_str);
            let culprit = referenced.iter().find(|name| {
                let alone = placeholder::substitute(text, &found, |n| {
                    if n == **name {
                        value(n)
                    } else {
                        sample(n)
                    }
                });
                alone.map_or(true, |alone| parse_document(&alone).is_err())
            });
            let why = errs
                .first()
                .map_or("not a valid config overrides document", |e| {
                    e.message.as_str()
                });
            let reason = match culprit {
                Some(name) => format!("with {} substituted: {why}", quote(value(name))),
                None => why.to_string(),
            };
            Err(fail(culprit.map(|n| format!("{}{n}", r.prefix)), reason))
        }
    }
}

/// Applies a parent's `entityOverrides` entry to a submodule's entity.
fn apply_override(
    draft: &mut Draft,
    o: &EntityOverride,
    parent: &Resolved<'_>,
    product_id: &str,
    source: &str,
) -> Result<(), RenderError> {
    let invalid = |field: &str, reason: String| RenderError::InvalidEntity {
        module: source.to_string(),
        product_id: product_id.to_string(),
        field: format!("entityOverrides.{field}"),
        reason,
    };
    let fill_parent = |field: &str, text: &str| {
        fill(text, &parent.values).map_err(|e| match e {
            Unfilled::Missing(name) => invalid(
                field,
                format!("variable {}{name} has no value", parent.prefix),
            ),
            Unfilled::Invalid(reason) => invalid(field, reason),
        })
    };
    if let Some(text) = &o.config_overrides {
        let doc = config_document(text, parent, product_id, "entityOverrides.configOverrides")?;
        for (version, top) in doc {
            merge(draft.config.entry(version).or_default(), &top);
        }
    }
    let secrets = fill_secrets(&o.secret_requirements, |t| {
        fill_parent("secretRequirements", t)
    })?;
    draft.entity.secret_requirements.extend(secrets);
    draft.entity.ignored_dependencies = o
        .ignored_dependencies
        .iter()
        .map(|d| fill_parent("ignoredDependencies", d))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(groups) = &o.dependency_groups {
        draft.entity.dependency_groups = groups
            .iter()
            .map(|g| fill_parent("dependencyGroups", g))
            .collect::<Result<Vec<_>, _>>()?;
    }
    Ok(())
}
