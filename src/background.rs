//! Background work that can wait while requests cannot: applying acknowledged events' effects,
//! evaluating signals and working automation runs. It runs on a runtime of its own whose
//! threads (and the SQLite connections they open) have a lower OS scheduling priority than the
//! request handlers', so on a saturated machine the kernel gives the CPUs to acknowledging
//! requests first and the effects catch up when the peak passes; on a machine with CPU to
//! spare nothing changes. docs/decisions.md ("Background work at a lower priority") says why.

use tokio::runtime::{Handle, Runtime};

/// The nice value of background threads: above the request handlers' 0, so a busy request
/// thread outweighs a background one about ten to one on a shared core, without starving it.
pub const NICE: i32 = 10;

/// Worker threads of the background runtime (the applier, the processor's batches in flight).
const WORKER_THREADS: usize = 2;

/// The background runtime; dropping it stops its tasks (without waiting for them).
pub struct Background {
    runtime: Option<Runtime>,
}

impl Background {
    /// Starts the runtime's threads at the background priority.
    pub fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("custintel-background")
            .enable_all()
            .on_thread_start(lower_this_threads_priority)
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Where background tasks are spawned.
    pub fn handle(&self) -> &Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle(),
            None => unreachable!("the runtime is taken only when dropped"),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // The server's future may be dropped inside another runtime (tests), where a blocking
        // shutdown is not allowed.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Raises the calling thread's nice value to [`NICE`]; threads it starts inherit it (on Linux
/// the nice value belongs to the thread). Raising it needs no privilege; where it fails the
/// thread keeps the normal priority, which is only slower under load.
pub fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a plain system call answering the calling thread's own id.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        lower_priority(tid);
    }
}

/// Raises the nice value of every thread of this process to [`NICE`] (threads they start
/// inherit it): for a process whose whole work can wait for requests, `custintel import` beside
/// a serving instance.
pub fn lower_this_process_priority() {
    #[cfg(target_os = "linux")]
    {
        let Ok(threads) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        for thread in threads.flatten() {
            if let Some(tid) = thread
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<libc::id_t>().ok())
            {
                lower_priority(tid);
            }
        }
    }
}

/// Raises thread `tid`'s nice value to [`NICE`]; a thread already at NICE or above is left
/// alone.
#[cfg(target_os = "linux")]
fn lower_priority(tid: libc::id_t) {
    // SAFETY: plain system calls on a thread of this process. (getpriority answers -1 for an
    // error too, which is below NICE: the set is then tried and fails alike.)
    let result = unsafe {
        if libc::getpriority(libc::PRIO_PROCESS, tid) >= NICE {
            return;
        }
        libc::setpriority(libc::PRIO_PROCESS, tid, NICE)
    };
    if result != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "could not lower a thread's priority"
        );
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The nice value of the calling thread.
    fn this_threads_nice() -> i32 {
        // SAFETY: plain system calls on the calling thread's own id. (getpriority answers -1
        // both for an error and for nice -1; no caller here needs them apart.)
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        }
    }

    /// Tasks, blocking work and threads started from the runtime (as SQLite connections'
    /// worker threads are) run at the lower priority; the caller's thread keeps its own.
    #[test]
    fn background_threads_run_at_the_lower_priority() {
        let before = this_threads_nice();
        let background = Background::start().expect("runtime");
        let handle = background.handle().clone();
        let (task, blocking, started) = handle.block_on(async {
            let task = tokio::spawn(async { this_threads_nice() });
            let blocking = tokio::task::spawn_blocking(this_threads_nice);
            let started = tokio::spawn(async {
                std::thread::spawn(this_threads_nice)
                    .join()
                    .expect("thread")
            });
            (
                task.await.expect("task"),
                blocking.await.expect("blocking"),
                started.await.expect("started"),
            )
        });
        // (A process already past NICE stays where it is: at least NICE either way.)
        assert!(task >= NICE, "task at nice {task}");
        assert!(blocking >= NICE, "blocking at nice {blocking}");
        assert!(started >= NICE, "thread at nice {started}");
        assert_eq!(this_threads_nice(), before, "the caller's priority changed");
        drop(background);
    }

    /// Set in the child process of [`a_whole_process_runs_at_the_lower_priority`].
    const CHILD: &str = "CUSTINTEL_TEST_LOWER_PROCESS";

    /// Threads running before the call and threads started after it run at the lower
    /// priority. The test runs itself again as a child process, since the change is for the
    /// whole process and would reach the other tests of this one.
    #[test]
    fn a_whole_process_runs_at_the_lower_priority() {
        if std::env::var_os(CHILD).is_none() {
            let exe = std::env::current_exe().expect("test executable");
            let output = std::process::Command::new(exe)
                .args([
                    "--exact",
                    "background::tests::a_whole_process_runs_at_the_lower_priority",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .expect("run the test again");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains("1 passed"),
                "the child process failed: {stdout} {}",
                String::from_utf8_lossy(&output.stderr)
            );
            return;
        }
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let earlier = std::thread::spawn(move || {
            ready_tx.send(()).expect("ready");
            go_rx.recv().expect("go");
            this_threads_nice()
        });
        ready_rx.recv().expect("the earlier thread started");
        lower_this_process_priority();
        go_tx.send(()).expect("go");
        let earlier = earlier.join().expect("earlier thread");
        let later = std::thread::spawn(this_threads_nice)
            .join()
            .expect("later thread");
        assert!(
            this_threads_nice() >= NICE,
            "the caller stays at normal priority"
        );
        assert!(earlier >= NICE, "a thread started before at nice {earlier}");
        assert!(later >= NICE, "a thread started after at nice {later}");
    }
}
