//! The statestore Mosquitto plugin (`broker-plugin/`) in a test broker: where cargo put the
//! .so, a password file, and a broker that loads both.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::broker::Broker;

/// The plugin's file name.
const FILE_NAME: &str = "libstatestore_mosquitto_plugin.so";

/// The plugin to load: `$STATESTORE_MOSQUITTO_PLUGIN`, else the one next to the test
/// executable (`<target>/<profile>/deps/`: `cargo test` builds a workspace's cdylibs there
/// before any test runs, so it is this build's), else `<target>/<profile>/` (`cargo build -p
/// statestore-mosquitto-plugin`, which `scripts/test.sh` runs first).
pub fn plugin_path() -> PathBuf {
    if let Ok(path) = std::env::var("STATESTORE_MOSQUITTO_PLUGIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    let candidates = [deps.join(FILE_NAME), deps.join("..").join(FILE_NAME)];
    candidates
        .iter()
        .find(|path| path.exists())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no {FILE_NAME} in {}: run `cargo build -p statestore-mosquitto-plugin` first \
                 (scripts/test.sh does)",
                deps.display()
            )
        })
}

/// A Mosquitto password file in `dir` with `users` (name, password), made with
/// `mosquitto_passwd`.
pub fn password_file(dir: &Path, users: &[(&str, &str)]) -> PathBuf {
    let file = dir.join("passwords");
    for (i, (user, password)) in users.iter().enumerate() {
        let mut cmd = Command::new("mosquitto_passwd");
        if i == 0 {
            cmd.arg("-c");
        }
        let status = cmd
            .arg("-b")
            .arg(&file)
            .arg(user)
            .arg(password)
            .status()
            .expect("mosquitto_passwd (apt-get install -y mosquitto)");
        assert!(status.success(), "mosquitto_passwd failed");
    }
    file
}

/// A broker on 127.0.0.1 that loads the plugin with `options` (`plugin_opt_` lines without
/// the prefix) and knows `users`; anonymous clients stay allowed (their identity is their
/// client id). `listeners`: further listener sections.
pub fn broker_with_plugin(
    dir: &Path,
    users: &[(&str, &str)],
    options: &[&str],
    listeners: &str,
) -> Broker {
    let passwords = password_file(dir, users);
    let mut extra = format!(
        "password_file {}\nplugin {}\n{listeners}",
        passwords.display(),
        plugin_path().display()
    );
    for option in options {
        extra.push_str(&format!("plugin_opt_{option}\n"));
    }
    Broker::start_with("127.0.0.1", &extra)
}
