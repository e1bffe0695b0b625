//! Child processes that die with the process that started them (Linux `PR_SET_PDEATHSIG`): an
//! example's ranks or server must not outlive it when it is killed, since without peer-failure
//! handling nothing else would stop them.
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the process `cmd` starts receive SIGKILL when this process dies.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: prctl is async-signal-safe and touches no memory of this process; the closure
    // runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}
