//! What a `bash` command can see of the worker, and what outlives it: an allowlisted
//! environment, nothing else of the worker's even through `/proc/$PPID/environ`, and no
//! background job once the command has ended, not even one that left its process
//! group with `setsid`.

use std::time::Duration;

use railyard_worker::tools::{ToolBox, ToolLimits};
use serde_json::json;

const CHILD_MARK: &str = "RAILYARD_TEST_BASH_ENV_CHILD";
const SECRET: &str = "sk-ant-never-seen-by-bash";
const GITHUB: &str = "ghp_not-for-bash";

/// The worker side, in a process of its own so that its environment is a real one
/// given at exec: protects the process as `Worker::run` does, runs one command, prints
/// what it saw between markers. Started by the test below.
#[tokio::test]
#[ignore = "run in a child process by bash_env::bash_sees_only_the_allowlist_and_no_worker_secret"]
async fn child_reports_what_bash_sees() {
    let Ok(ws) = std::env::var(CHILD_MARK) else {
        panic!("only meant to run as the child of the test named in the ignore reason");
    };
    let done = railyard_worker::secrets::protect_process(&["RAILYARD_TEST_PASS".to_string()], &[]);
    assert!(done.non_dumpable);
    for name in ["ANTHROPIC_API_KEY", "GITHUB_TOKEN", "RAILYARD_TEST_NOT_PASSED"] {
        assert!(done.wiped.contains(&name.to_string()), "{name}: {done:?}");
    }
    assert!(
        !done.wiped.contains(&"RAILYARD_TEST_PASS".to_string()),
        "{done:?}"
    );
    assert!(!done.wiped.contains(&"PATH".to_string()), "{done:?}");
    assert!(std::env::var("ANTHROPIC_API_KEY").is_err());
    assert!(!String::from_utf8_lossy(&std::fs::read("/proc/self/environ").unwrap()).contains(SECRET));
    let limits = ToolLimits {
        bash_env: vec!["RAILYARD_TEST_PASS".into()],
        ..ToolLimits::default()
    };
    let tools = ToolBox::new(std::path::Path::new(&ws), limits).unwrap();
    let out = tools
        .execute(
            "bash",
            &json!({"command": "env | sort; echo '---PARENT---'; tr '\\0' '\\n' < /proc/$PPID/environ; echo '---END---'"}),
        )
        .await;
    println!("<<<{}>>>", out.content);
}

#[test]
fn bash_sees_only_the_allowlist_and_no_worker_secret() {
    let ws = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "bash_env::child_reports_what_bash_sees",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_MARK, ws.path())
        .env("ANTHROPIC_API_KEY", SECRET)
        .env("GITHUB_TOKEN", GITHUB)
        .env("RAILYARD_TEST_PASS", "passed-through")
        .env("RAILYARD_TEST_NOT_PASSED", "kept-back")
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = stdout
        .split_once("<<<")
        .and_then(|(_, rest)| rest.split_once(">>>"))
        .map(|(seen, _)| seen)
        .expect("the child's report");
    let (own, parent) = seen.split_once("---PARENT---").expect("both parts");
    assert!(own.starts_with("exit code: 0"), "{seen}");

    // Its own environment: the default set, HOME = the workspace, the pass-through list.
    let names: Vec<&str> = own
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n))
        .collect();
    let canonical = ws.path().canonicalize().unwrap();
    assert!(own.contains(&format!("HOME={}", canonical.display())), "{own}");
    assert!(own.contains("RAILYARD_TEST_PASS=passed-through"), "{own}");
    assert!(own.contains("LANG=C.UTF-8") && own.contains("PATH="), "{own}");
    for name in &names {
        assert!(
            [
                "HOME",
                "PATH",
                "LANG",
                "LC_ALL",
                "TERM",
                "TZ",
                "RAILYARD_TEST_PASS",
                "RAILYARD_BASH_CALL",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(name),
            "bash got {name}: {own}"
        );
    }
    assert!(!own.contains(GITHUB) && !own.contains("kept-back"), "{own}");
    // Its parent's (the worker's) environment: everything bash does not get is wiped.
    assert!(parent.contains("---END---"), "{parent}");
    // The read itself worked (as root, which may read any process's environ) or was
    // refused (a non-dumpable worker, for any other user): either way no secret.
    assert!(
        parent.contains("RAILYARD_TEST_PASS=passed-through") || parent.contains("Permission denied"),
        "{parent}"
    );
    assert!(
        !parent.contains(GITHUB) && !parent.contains("kept-back"),
        "{parent}"
    );
    assert!(!seen.contains(SECRET), "the provider key leaked: {seen}");
}

#[tokio::test]
async fn background_jobs_end_with_the_command() {
    let ws = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(ws.path(), ToolLimits::default()).unwrap();
    let out = tools
        .execute("bash", &json!({"command": "sleep 300 >/dev/null 2>&1 & echo $!"}))
        .await;
    assert!(!out.is_error, "{}", out.content);
    let pid: i32 = out
        .content
        .lines()
        .find_map(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {}", out.content));
    // The group was killed when the shell ended; the job is gone (or a zombie waiting
    // for init to reap it). Bounded wait: SIGKILL is delivered at once, reaping may lag.
    let gone = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    };
    for _ in 0..300 {
        if gone() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("background job {pid} outlived its command");
}

#[tokio::test]
async fn a_step_ending_mid_command_kills_its_whole_group() {
    let ws = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(ws.path(), ToolLimits::default()).unwrap();
    let pid_file = ws.path().join("bg.pid");
    let call = json!({"command": "sleep 300 >/dev/null 2>&1 & echo $! > bg.pid; sleep 300"});
    // Boxed, so that dropping it drops the call itself.
    let mut running = Box::pin(tools.execute("bash", &call));
    // Run the command until the background job is started, then drop it: what a step
    // canceled or out of time does to the call in flight.
    let started = async {
        loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let pid = tokio::select! {
        out = &mut running => panic!("the command ended early: {}", out.content),
        pid = tokio::time::timeout(Duration::from_secs(30), started) => pid.expect("the job started"),
    };
    drop(running);
    let gone = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    };
    for _ in 0..300 {
        if gone() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("background job {pid} outlived the step");
}

/// The `sleep` processes running with one of `args`, by their command lines.
fn sleeps_running(args: &[&str]) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| {
            let words: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            words.first().is_some_and(|w| w.ends_with(b"sleep"))
                && words
                    .get(1)
                    .is_some_and(|a| args.iter().any(|x| x.as_bytes() == *a))
        })
        .count()
}

/// `setsid sleep 803 &` and `setsid -f` once outlived the step and the worker.
#[tokio::test]
async fn jobs_that_left_the_process_group_end_with_the_command() {
    assert!(railyard_worker::tools::reaper::adopt_orphans());
    let ws = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(ws.path(), ToolLimits::default()).unwrap();
    let args = ["80311", "80312", "80313"];
    let out = tools
        .execute(
            "bash",
            &json!({"command": "setsid sleep 80311 >/dev/null 2>&1 & setsid -f sleep 80312 >/dev/null 2>&1; \
                setsid -f bash -c 'sleep 80313 & wait' >/dev/null 2>&1; sleep 0.2; echo started"}),
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
    // Bounded wait: the sweep runs before the call answers; this only allows for a
    // killed process that has not been reaped yet.
    for _ in 0..300 {
        if sleeps_running(&args) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} setsid'd jobs outlived their command", sleeps_running(&args));
}

const CONCURRENT_MARK: &str = "RAILYARD_TEST_BASH_CONCURRENT_CHILD";

/// A worker process's side (a child subreaper in strict mode, as `railyard worker`
/// runs): many commands at once, each ending with a sweep while others are being
/// started. Prints how many failed. Started by the test below.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "run in a child process by bash_env::concurrent_commands_are_never_swept_as_orphans_of_each_other"]
async fn child_runs_commands_side_by_side() {
    let Ok(ws) = std::env::var(CONCURRENT_MARK) else {
        panic!("only meant to run as the child of the test named in the ignore reason");
    };
    assert!(railyard_worker::tools::reaper::adopt_orphans());
    railyard_worker::tools::reaper::set_strict(true);
    let tools = ToolBox::new(std::path::Path::new(&ws), ToolLimits::default()).unwrap();
    let mut failed = Vec::new();
    for round in 0..8 {
        let calls = (0..12).map(|i| {
            let tools = tools.clone();
            tokio::spawn(async move {
                let name = format!("m{round}-{i}.txt");
                let out = tools
                    .execute(
                        "bash",
                        &json!({"command": format!("echo {name} > {name}; cat {name}")}),
                    )
                    .await;
                (name, out)
            })
        });
        for call in calls.collect::<Vec<_>>() {
            let (name, out) = call.await.unwrap();
            if out.is_error || !out.content.contains(&name) {
                failed.push(format!("{name}: {}", out.content));
            }
        }
    }
    println!("<<<{}>>>", failed.join("\n"));
}

#[test]
fn concurrent_commands_are_never_swept_as_orphans_of_each_other() {
    let ws = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "bash_env::child_runs_commands_side_by_side",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CONCURRENT_MARK, ws.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let failed = stdout
        .split_once("<<<")
        .and_then(|(_, rest)| rest.split_once(">>>"))
        .map(|(failed, _)| failed)
        .expect("the child's report");
    assert_eq!(failed, "", "commands that failed");
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 96);
}
