use std::time::Duration;

use prometheus::Registry;

use super::*;

fn supervisor(failpoint: Option<&str>) -> (Supervisor, Registry) {
    let registry = Registry::new();
    let supervisor = Supervisor::new(&registry, failpoint).expect("supervisor");
    (supervisor, registry)
}

fn failures_counted(supervisor: &Supervisor, task: Task) -> u64 {
    supervisor
        .failures_total
        .with_label_values(&[task.name()])
        .get()
}

#[tokio::test]
async fn a_task_that_returns_is_a_failure_and_is_counted() {
    let (mut supervisor, registry) = supervisor(None);
    assert!(
        registry
            .gather()
            .iter()
            .any(|family| family.name() == "statestore_task_failures_total"),
        "registered"
    );
    supervisor.spawn(Task::Leader, std::future::pending());
    supervisor.spawn(Task::Expiry, async {});
    let failure = supervisor.failure().await;
    assert_eq!(
        failure,
        Failure {
            task: Task::Expiry,
            panicked: false
        }
    );
    assert_eq!(failure.to_string(), "task expiry ended unexpectedly");
    assert_eq!(failures_counted(&supervisor, Task::Expiry), 1);
    assert_eq!(failures_counted(&supervisor, Task::Leader), 0);
}

#[tokio::test]
async fn a_task_that_panics_is_reported_as_panicked() {
    let (mut supervisor, _registry) = supervisor(None);
    supervisor.spawn(Task::Notifier, async { panic!("boom") });
    let failure = supervisor.failure().await;
    assert_eq!(failure.task, Task::Notifier);
    assert!(failure.panicked);
    assert_eq!(failure.to_string(), "task notifier panicked");
}

#[tokio::test]
async fn a_thread_holding_a_guard_reports_its_panic() {
    let (mut supervisor, _registry) = supervisor(None);
    let guard = supervisor.exit_guard(Task::MqttSession);
    let thread = std::thread::spawn(move || {
        let _guard = guard;
        panic!("session thread dies");
    });
    assert!(thread.join().is_err(), "the thread panicked");
    let failure = supervisor.failure().await;
    assert_eq!(failure.task, Task::MqttSession);
    assert!(failure.panicked);
}

#[tokio::test(start_paused = true)]
async fn the_failpoint_panics_the_named_task_only() {
    let (mut supervisor, _registry) = supervisor(Some("device-sweep"));
    supervisor.spawn(Task::DevicePush, std::future::pending());
    supervisor.spawn(Task::DeviceSweep, std::future::pending());
    let failure = supervisor.failure().await;
    assert_eq!(
        failure,
        Failure {
            task: Task::DeviceSweep,
            panicked: true
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_failpoint_naming_no_task_injects_nothing() {
    let (mut supervisor, _registry) = supervisor(Some("no-such-task"));
    supervisor.spawn(Task::Gauges, std::future::pending());
    let waited = tokio::time::timeout(Duration::from_secs(60), supervisor.failure()).await;
    assert!(waited.is_err(), "no failure: {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn join_waits_for_stopping_tasks_and_aborts_and_names_the_rest() {
    let (mut supervisor, _registry) = supervisor(None);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    for task in [Task::Expiry, Task::Leader] {
        let mut stop = stop.clone();
        supervisor.spawn(task, async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        });
    }
    supervisor.spawn(Task::Notifier, std::future::pending());
    stop_tx.send(true).expect("stop");
    let aborted = supervisor.join(Duration::from_secs(5)).await;
    assert_eq!(aborted, vec!["notifier"]);
}

#[tokio::test]
async fn join_of_tasks_that_all_stop_aborts_nothing() {
    let (mut supervisor, _registry) = supervisor(None);
    supervisor.spawn(Task::Expiry, async {});
    supervisor.spawn(Task::Gauges, async {});
    assert!(supervisor.join(Duration::from_secs(5)).await.is_empty());
}

#[test]
fn names_are_unique_and_name_their_task() {
    for task in Task::ALL {
        assert_eq!(Task::named(task.name()), Some(task), "{task:?}");
    }
    let mut names: Vec<_> = Task::ALL.iter().map(|task| task.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Task::ALL.len());
}

/// `docs/architecture.md` draws the tasks the supervisor runs: its task table (the rows
/// between the `<!-- tasks -->` markers, first column a task name in backquotes) lists exactly
/// [`Task::ALL`], in that order.
#[test]
fn the_architecture_document_lists_the_supervised_tasks() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/architecture.md");
    let document = std::fs::read_to_string(path).expect("docs/architecture.md");
    let start = document.find("<!-- tasks -->").expect("start marker");
    let end = document.find("<!-- /tasks -->").expect("end marker");
    let documented: Vec<&str> = document[start..end]
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    let supervised: Vec<&str> = Task::ALL.iter().map(|task| task.name()).collect();
    assert_eq!(documented, supervised);
}
