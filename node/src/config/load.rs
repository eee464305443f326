//! How a [`Config`] is assembled: the settings table's defaults as a TOML tree, a file laid
//! over them, and the tree deserialised (unknown keys and wrong types refused). Each section's
//! `Default` is the table's too. Flags are laid onto the same tree by `cli.rs`.

use std::path::Path;

use super::table::SETTINGS;
use super::{
    AdminConfig, AuthConfig, ClusterConfig, Config, DedupConfig, DeviceboundConfig, ExpiryConfig,
    LimitsConfig, ListenConfig, MqttConfig, MqttTlsConfig, StorageConfig, TelemetryConfig, invalid,
    setting,
};
use crate::error::NodeError;

/// Each section's defaults are the settings table's.
macro_rules! section_defaults {
    ($($field:ident: $section:ty),* $(,)?) => {
        $(
            impl Default for $section {
                fn default() -> Self {
                    Config::default().$field
                }
            }
        )*
    };
}

section_defaults!(
    listen: ListenConfig,
    cluster: ClusterConfig,
    mqtt: MqttConfig,
    limits: LimitsConfig,
    expiry: ExpiryConfig,
    dedup: DedupConfig,
    storage: StorageConfig,
    telemetry: TelemetryConfig,
    devicebound: DeviceboundConfig,
    admin: AdminConfig,
    auth: AuthConfig,
);

impl Default for MqttTlsConfig {
    fn default() -> Self {
        Config::default().mqtt.tls
    }
}

impl Default for Config {
    /// Every row's default (the table's unit tests prove they make a valid `Config`).
    fn default() -> Self {
        match Config::from_tree(Config::defaults_tree()) {
            Ok(config) => config,
            Err(error) => panic!("the settings table's defaults do not make a Config: {error}"),
        }
    }
}

impl Config {
    /// The TOML document of every row's default.
    pub fn defaults_tree() -> toml::Table {
        match setting::defaults(SETTINGS) {
            Ok(tree) => tree,
            Err(error) => panic!("the settings table's paths clash: {error}"),
        }
    }

    /// The defaults with a TOML document laid over them; syntax errors are refused here, wrong
    /// types and unknown keys by [`Config::from_tree`].
    pub fn tree_from_str(text: &str) -> Result<toml::Table, NodeError> {
        let file: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut tree = Config::defaults_tree();
        setting::merge(&mut tree, file);
        Ok(tree)
    }

    /// A complete document as a `Config` (unknown keys and wrong types refused). Ranges are
    /// not checked here: [`Config::check_settings`] does.
    pub fn from_tree(tree: toml::Table) -> Result<Config, NodeError> {
        toml::Value::Table(tree)
            .try_into()
            .map_err(|e: toml::de::Error| invalid(e.to_string().trim_end().to_owned()))
    }

    /// The defaults with a TOML document's settings over them.
    pub fn from_toml_str(text: &str) -> Result<Config, NodeError> {
        Config::from_tree(Config::tree_from_str(text)?)
    }

    /// The defaults with a file's settings over them, as a tree (its errors name the file).
    pub fn tree_from_file(path: &Path) -> Result<toml::Table, NodeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        let named = |e: NodeError| match e {
            NodeError::Config(message) => invalid(format!("{}: {message}", path.display())),
            other => other,
        };
        let tree = Config::tree_from_str(&text).map_err(named)?;
        // Wrong types and unknown keys are the file's: say so now, naming it.
        Config::from_tree(tree.clone()).map_err(named)?;
        Ok(tree)
    }

    /// Reads a TOML file (unknown keys are errors).
    pub fn from_file(path: &Path) -> Result<Config, NodeError> {
        Config::from_tree(Config::tree_from_file(path)?)
    }
}
