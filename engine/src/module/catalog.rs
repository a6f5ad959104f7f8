//! Cross-module validation (SPEC M6, M7): a definition checked against the published modules
//! it includes. The catalog is a read-only view supplied by the caller, so this stays pure.

use std::collections::BTreeMap;

use semver::Version;

use super::definition::ModuleDefinition;
use super::error::{quote, DefinitionError, DefinitionErrors};
use super::parse::parse_indexed;
use super::position::PositionIndex;
use super::variable::{list, Variable};

/// Deepest chain of submodules followed (a module, its submodule, theirs, ...).
pub const MAX_SUBMODULE_DEPTH: usize = 16;

/// Most module versions visited while looking for submodule cycles.
const MAX_VISITS: usize = 10_000;

/// Published module definitions, looked up by name and exact version.
pub trait ModuleCatalog {
    /// The definition of `name` at `version`, if it was published.
    fn definition(&self, name: &str, version: &Version) -> Option<&ModuleDefinition>;
}

impl ModuleCatalog for BTreeMap<(String, Version), ModuleDefinition> {
    fn definition(&self, name: &str, version: &Version) -> Option<&ModuleDefinition> {
        self.get(&(name.to_string(), version.clone()))
    }
}

/// Checks `def`'s submodules against `catalog`: each exists at its exact version, its
/// `variableOverrides` name variables it defines (not presets) with acceptable literal
/// values, its `entityOverrides` are allowed by its restrictions and name its entities, and
/// no chain of submodules leads back to a module name already on it. Errors carry paths but
/// no lines (the text is not at hand); [`parse_and_validate`] adds them.
pub fn validate_against(
    def: &ModuleDefinition,
    catalog: &dyn ModuleCatalog,
) -> Result<(), DefinitionErrors> {
    let mut errors = Vec::new();
    for (i, sub) in def.submodules.iter().enumerate() {
        let path = format!("submodules[{i}]");
        let Some(sd) = catalog.definition(&sub.name, &sub.version) else {
            errors.push(DefinitionError::new(
                format!("{path}.version"),
                format!(
                    "module {} has no published version {}; submodules are included at an \
                     exact, published version",
                    sub.name, sub.version
                ),
            ));
            continue;
        };
        for (name, value) in &sub.variable_overrides {
            let p = format!("{path}.variableOverrides.{name}");
            match sd.variables.get(name) {
                None => errors.push(DefinitionError::new(
                    p,
                    format!(
                        "module {} {} has no variable {} (its variables: {})",
                        sd.name,
                        sub.version,
                        quote(name),
                        list(sd.variables.keys().map(String::as_str))
                    ),
                )),
                Some(Variable::StringPreset { options, .. }) => errors.push(DefinitionError::new(
                    p,
                    format!(
                        "{} is a stringPreset of module {} and cannot be set; override its \
                             options variable `{options}` instead",
                        quote(name),
                        sd.name
                    ),
                )),
                Some(var) => {
                    if !value.contains("{{") {
                        if let Err(why) = var.check_value(value) {
                            errors.push(DefinitionError::new(p, why.to_string()));
                        }
                    }
                }
            }
        }
        if !sub.entity_overrides.is_empty() {
            if !sd.restrictions.allow_entity_overrides {
                errors.push(DefinitionError::new(
                    format!("{path}.entityOverrides"),
                    format!(
                        "module {} does not allow entityOverrides \
                         (restrictions.submoduleUsage.allowEntityOverrides: false); only \
                         variableOverrides may be used",
                        sd.name
                    ),
                ));
            } else {
                for product in sub.entity_overrides.keys() {
                    if !sd.entities.iter().any(|e| &e.product_id == product) {
                        errors.push(DefinitionError::new(
                            format!("{path}.entityOverrides.{product}"),
                            format!(
                                "module {} {} has no entity with productId {product}",
                                sd.name, sub.version
                            ),
                        ));
                    }
                }
            }
        }
        if sub.name != def.name {
            let mut chain = vec![def.name.clone(), sub.name.clone()];
            let mut visits = 0;
            match find_cycle(catalog, sd, &mut chain, &mut visits) {
                Ok(None) => {}
                Ok(Some(cycle)) => errors.push(DefinitionError::new(
                    path,
                    format!("submodule cycle: {}", cycle.join(" → ")),
                )),
                Err(too_large) => errors.push(DefinitionError::new(path, too_large.to_string())),
            }
        }
    }
    match DefinitionErrors::from_vec(errors) {
        None => Ok(()),
        Some(errors) => Err(errors),
    }
}

/// A submodule tree past [`MAX_SUBMODULE_DEPTH`] levels or [`MAX_VISITS`] visits: the chain
/// followed and the submodule it reached.
#[derive(Debug, thiserror::Error)]
#[error(
    "submodules nest too deeply or too widely (at most {MAX_SUBMODULE_DEPTH} levels): {} → {next}",
    chain.join(" → ")
)]
struct TreeTooLarge {
    /// The modules followed, outermost first.
    chain: Vec<String>,
    /// The submodule it reached.
    next: String,
}

/// Follows `def`'s submodules depth-first; a name already on `chain` closes a cycle, returned
/// as the chain ending with that name.
fn find_cycle(
    catalog: &dyn ModuleCatalog,
    def: &ModuleDefinition,
    chain: &mut Vec<String>,
    visits: &mut usize,
) -> Result<Option<Vec<String>>, TreeTooLarge> {
    for s in &def.submodules {
        if chain.contains(&s.name) {
            let mut cycle = chain.clone();
            cycle.push(s.name.clone());
            return Ok(Some(cycle));
        }
        *visits += 1;
        if chain.len() >= MAX_SUBMODULE_DEPTH || *visits > MAX_VISITS {
            return Err(TreeTooLarge {
                chain: chain.clone(),
                next: s.name.clone(),
            });
        }
        if let Some(sd) = catalog.definition(&s.name, &s.version) {
            chain.push(s.name.clone());
            let found = find_cycle(catalog, sd, chain, visits)?;
            chain.pop();
            if found.is_some() {
                return Ok(found);
            }
        }
    }
    Ok(None)
}

/// A definition that passed every check of its own file, with the index that locates later
/// errors in its text: the first half of [`parse_and_validate`], which needs no catalog.
/// Parsing is the costly half, so a reader can run it without holding the state the catalog
/// lives in, and take the state only for [`ParsedDefinition::validate_against`].
#[derive(Debug)]
pub struct ParsedDefinition {
    def: ModuleDefinition,
    index: PositionIndex,
}

impl ParsedDefinition {
    /// [`parse_definition`](super::parse_definition), keeping the position index.
    pub fn parse(file_name: Option<&str>, yaml: &str) -> Result<Self, DefinitionErrors> {
        let (def, index) = parse_indexed(file_name, yaml)?;
        Ok(ParsedDefinition { def, index })
    }

    /// The module's name, as the file declares it.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// [`validate_against`] `catalog`, with every error located in the parsed text.
    pub fn validate_against(
        self,
        catalog: &dyn ModuleCatalog,
    ) -> Result<ModuleDefinition, DefinitionErrors> {
        if let Err(mut errors) = validate_against(&self.def, catalog) {
            for e in errors.iter_mut() {
                self.index.locate_error(e);
            }
            return Err(errors);
        }
        Ok(self.def)
    }
}

/// [`parse_definition`](super::parse_definition) then [`validate_against`], with every error
/// located in `yaml`: what publishing a module version runs.
pub fn parse_and_validate(
    file_name: Option<&str>,
    yaml: &str,
    catalog: &dyn ModuleCatalog,
) -> Result<ModuleDefinition, DefinitionErrors> {
    ParsedDefinition::parse(file_name, yaml)?.validate_against(catalog)
}
