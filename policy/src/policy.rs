//! A checked policy compiled for lookups: principals indexed (exact ones in a hash map, globs
//! in a list, each pointing at its rules and groups), key bytes and globs shared, so that
//! [`Policy::grants`] merges one identity's rules in microseconds.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use crate::document::{self, Document, Key, Matcher, Subjects};
use crate::error::PolicyError;
use crate::grants::{DeviceAction, Grants, GrantsData, Pattern, PatternIndex};

/// A compiled policy: parse it once, then ask [`Policy::grants`] per identity.
pub struct Policy {
    /// State store rules first (indices `0..state_rules.len()`), then devicebound rules.
    state_rules: Vec<StateRule>,
    device_rules: Vec<DeviceRule>,
    exact_principals: HashMap<Box<str>, Targets>,
    glob_principals: Vec<(Pattern, Targets)>,
    /// Each group's rules (indices as above), ascending.
    groups: Vec<Vec<u32>>,
    /// Distinct key globs, referred to by [`StateRule::patterns`].
    key_patterns: Vec<Pattern>,
    /// Distinct device globs, referred to by [`DeviceRule::patterns`].
    device_patterns: Vec<Pattern>,
}

/// What a principal leads to: rules naming it, and groups listing it (both ascending, once).
#[derive(Debug, Default)]
struct Targets {
    rules: Vec<u32>,
    groups: Vec<u32>,
}

#[derive(Debug)]
struct StateRule {
    access: u8,
    exact: Vec<Arc<[u8]>>,
    /// Indices into [`Policy::key_patterns`].
    patterns: Vec<u32>,
}

#[derive(Debug)]
struct DeviceRule {
    actions: u8,
    exact: Vec<Arc<str>>,
    /// Indices into [`Policy::device_patterns`].
    patterns: Vec<u32>,
}

impl std::fmt::Debug for Policy {
    /// A summary: a policy may hold a million keys.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Policy")
            .field("state_store_rules", &self.state_rules.len())
            .field("devicebound_rules", &self.device_rules.len())
            .field("groups", &self.groups.len())
            .field("exact_principals", &self.exact_principals.len())
            .field("glob_principals", &self.glob_principals.len())
            .field("key_patterns", &self.key_patterns.len())
            .field("device_patterns", &self.device_patterns.len())
            .finish()
    }
}

/// Rule and group counts fit: at most `MAX_RULES` and `MAX_GROUPS`.
fn index(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Pushes `value` unless it is already last (values arrive in ascending runs).
fn push_once(list: &mut Vec<u32>, value: u32) {
    if list.last() != Some(&value) {
        list.push(value);
    }
}

/// Builds the principal index while rules and groups are compiled.
#[derive(Default)]
struct Principals {
    exact: HashMap<Box<str>, Targets>,
    globs: Vec<(Pattern, Targets)>,
    glob_index: HashMap<String, usize>,
}

impl Principals {
    fn targets(&mut self, matcher: &Matcher) -> &mut Targets {
        match matcher {
            Matcher::Exact(text) => self.exact.entry(text.as_str().into()).or_default(),
            Matcher::Glob(text, glob) => {
                let slot = match self.glob_index.entry(text.clone()) {
                    Entry::Occupied(occupied) => *occupied.get(),
                    Entry::Vacant(vacant) => {
                        self.globs
                            .push((Pattern::new(text, glob.clone()), Targets::default()));
                        *vacant.insert(self.globs.len() - 1)
                    }
                };
                // `slot` was pushed just now or earlier: always in range.
                &mut self.globs[slot].1
            }
        }
    }

    fn add_rule(&mut self, subjects: &Subjects, rule: u32, groups: &mut [Vec<u32>]) {
        for principal in &subjects.principals {
            push_once(&mut self.targets(principal).rules, rule);
        }
        for &group in &subjects.groups {
            if let Some(rules) = groups.get_mut(group) {
                push_once(rules, rule);
            }
        }
    }
}

/// Interns globs by their text, so that each is compiled and merged once.
struct Interner<'a> {
    patterns: &'a mut Vec<Pattern>,
    index: HashMap<String, u32>,
}

impl Interner<'_> {
    fn intern(&mut self, text: &str, glob: &statestore_protocol::glob::Glob) -> u32 {
        if let Some(&id) = self.index.get(text) {
            return id;
        }
        let id = index(self.patterns.len());
        self.patterns.push(Pattern::new(text, glob.clone()));
        self.index.insert(text.to_owned(), id);
        id
    }
}

impl Policy {
    /// Parses and compiles a policy text (the format is in the crate's documentation).
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        Ok(Policy::compile(document::read(text)?))
    }

    /// A policy with no rules: open, everything allowed.
    pub fn open() -> Policy {
        Policy {
            state_rules: Vec::new(),
            device_rules: Vec::new(),
            exact_principals: HashMap::new(),
            glob_principals: Vec::new(),
            groups: Vec::new(),
            key_patterns: Vec::new(),
            device_patterns: Vec::new(),
        }
    }

    /// True if the policy has no rules: everything is allowed.
    pub fn is_open(&self) -> bool {
        self.rule_count() == 0
    }

    /// The number of rules (`state_store` and `devicebound`).
    pub fn rule_count(&self) -> usize {
        self.state_rules.len() + self.device_rules.len()
    }

    fn compile(document: Document) -> Policy {
        let mut principals = Principals::default();
        let mut groups = vec![Vec::new(); document.groups.len()];
        // Group members point at their group; the groups' rule lists are filled below.
        for (group, members) in document.groups.iter().enumerate() {
            for member in &members.members {
                push_once(&mut principals.targets(member).groups, index(group));
            }
        }
        let mut key_patterns = Vec::new();
        let mut keys = Interner {
            patterns: &mut key_patterns,
            index: HashMap::new(),
        };
        let mut exact_keys: HashMap<Vec<u8>, Arc<[u8]>> = HashMap::new();
        let mut state_rules = Vec::with_capacity(document.state_store.len());
        for (rule_index, rule) in document.state_store.iter().enumerate() {
            principals.add_rule(&rule.subjects, index(rule_index), &mut groups);
            let mut exact = Vec::new();
            let mut patterns = Vec::new();
            for key in &rule.keys {
                match key {
                    Key::Exact(bytes) => exact.push(
                        exact_keys
                            .entry(bytes.clone())
                            .or_insert_with(|| Arc::from(bytes.as_slice()))
                            .clone(),
                    ),
                    Key::Glob(text, glob) => patterns.push(keys.intern(text, glob)),
                }
            }
            state_rules.push(StateRule {
                access: rule.access,
                exact,
                patterns,
            });
        }
        drop(exact_keys);
        let mut device_patterns = Vec::new();
        let mut devices = Interner {
            patterns: &mut device_patterns,
            index: HashMap::new(),
        };
        let mut exact_devices: HashMap<&str, Arc<str>> = HashMap::new();
        let mut device_rules = Vec::with_capacity(document.devicebound.len());
        for (rule_index, rule) in document.devicebound.iter().enumerate() {
            let rule_id = index(state_rules.len() + rule_index);
            principals.add_rule(&rule.subjects, rule_id, &mut groups);
            let mut exact = Vec::new();
            let mut patterns = Vec::new();
            for device in &rule.devices {
                match device {
                    Matcher::Exact(text) => exact.push(
                        exact_devices
                            .entry(text.as_str())
                            .or_insert_with(|| Arc::from(text.as_str()))
                            .clone(),
                    ),
                    Matcher::Glob(text, glob) => patterns.push(devices.intern(text, glob)),
                }
            }
            device_rules.push(DeviceRule {
                actions: rule.actions,
                exact,
                patterns,
            });
        }
        let mut exact_principals = principals.exact;
        exact_principals.shrink_to_fit();
        Policy {
            state_rules,
            device_rules,
            exact_principals,
            glob_principals: principals.globs,
            groups,
            key_patterns,
            device_patterns,
        }
    }

    /// What `identity` may do: every rule naming it (exactly, by a glob, or through a group)
    /// merged. An open policy's grants allow everything; `None` (an unknown requester) matches
    /// no principal.
    pub fn grants(&self, identity: Option<&str>) -> Grants {
        if self.is_open() {
            return Grants::open();
        }
        let Some(identity) = identity else {
            return Grants::new(GrantsData::default());
        };
        let mut rules = Vec::new();
        let mut groups = Vec::new();
        let mut collect = |targets: &Targets| {
            rules.extend_from_slice(&targets.rules);
            groups.extend_from_slice(&targets.groups);
        };
        if let Some(targets) = self.exact_principals.get(identity) {
            collect(targets);
        }
        for (pattern, targets) in &self.glob_principals {
            if pattern.matches_utf8(identity.as_bytes()) {
                collect(targets);
            }
        }
        groups.sort_unstable();
        groups.dedup();
        for group in groups {
            if let Some(group_rules) = self.groups.get(group as usize) {
                rules.extend_from_slice(group_rules);
            }
        }
        rules.sort_unstable();
        rules.dedup();
        self.merge(&rules)
    }

    /// Merges `rules` (ascending, distinct) into grants.
    fn merge(&self, rules: &[u32]) -> Grants {
        let mut data = GrantsData::default();
        let split = rules.partition_point(|&rule| (rule as usize) < self.state_rules.len());
        let (state, device) = rules.split_at(split);
        let state: Vec<&StateRule> = state
            .iter()
            .filter_map(|&rule| self.state_rules.get(rule as usize))
            .collect();
        data.keys
            .reserve(state.iter().map(|rule| rule.exact.len()).sum());
        let mut seen = HashMap::new();
        let mut key_patterns = Vec::new();
        for rule in state {
            data.key_bits |= rule.access;
            for key in &rule.exact {
                *data.keys.entry(key.clone()).or_insert(0) |= rule.access;
            }
            for &id in &rule.patterns {
                merge_pattern(
                    &mut key_patterns,
                    &mut seen,
                    &self.key_patterns,
                    id,
                    rule.access,
                );
            }
        }
        data.keys.shrink_to_fit();
        let device: Vec<&DeviceRule> = device
            .iter()
            .filter_map(|&rule| {
                self.device_rules
                    .get(rule as usize - self.state_rules.len())
            })
            .collect();
        data.devices
            .reserve(device.iter().map(|rule| rule.exact.len()).sum());
        data.key_patterns = PatternIndex::new(key_patterns);
        seen.clear();
        let mut device_patterns = Vec::new();
        for rule in device {
            data.feedback |= rule.actions & DeviceAction::Feedback.bit() != 0;
            let actions = rule.actions & !DeviceAction::Feedback.bit();
            if actions == 0 {
                continue;
            }
            data.device_bits |= actions;
            for device in &rule.exact {
                *data.devices.entry(device.clone()).or_insert(0) |= actions;
            }
            for &id in &rule.patterns {
                merge_pattern(
                    &mut device_patterns,
                    &mut seen,
                    &self.device_patterns,
                    id,
                    actions,
                );
            }
        }
        data.devices.shrink_to_fit();
        data.device_patterns = PatternIndex::new(device_patterns);
        Grants::new(data)
    }
}

/// Adds glob `id` with `bits` to `merged`, or its bits to the glob's entry if already there.
fn merge_pattern(
    merged: &mut Vec<(Pattern, u8)>,
    seen: &mut HashMap<u32, usize>,
    patterns: &[Pattern],
    id: u32,
    bits: u8,
) {
    match seen.entry(id) {
        Entry::Occupied(occupied) => {
            if let Some((_, merged_bits)) = merged.get_mut(*occupied.get()) {
                *merged_bits |= bits;
            }
        }
        Entry::Vacant(vacant) => {
            if let Some(pattern) = patterns.get(id as usize) {
                vacant.insert(merged.len());
                merged.push((pattern.clone(), bits));
            }
        }
    }
}

#[cfg(test)]
mod tests;
