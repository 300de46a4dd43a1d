//! Debian 12 roots made by debootstrap and kept between runs, for what the tests run as shipped:
//! an image's base, a systemd to boot the unit under. Each root is made once per machine (a
//! minute); the tests copy one before they change it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::fcntl::{Flock, FlockArg};

/// Where the roots live (`STRONGSYNC_ROOTS`, else `/var/tmp/strongsync-roots`).
fn base() -> PathBuf {
    std::env::var_os("STRONGSYNC_ROOTS")
        .map_or_else(|| PathBuf::from("/var/tmp/strongsync-roots"), PathBuf::from)
}

/// A minimal bookworm root called `name` with `include` installed, made by debootstrap unless
/// one with the same packages is there already. Tests of one run that ask for the same root
/// wait for the first to make it.
pub fn root(name: &str, include: &[&str]) -> PathBuf {
    let base = base();
    std::fs::create_dir_all(&base).unwrap();
    let lock = File::create(base.join(format!("{name}.lock"))).unwrap();
    let _held = Flock::lock(lock, FlockArg::LockExclusive).expect("lock the root");
    let dir = base.join(name);
    let ready = base.join(format!("{name}.ready"));
    let wanted = include.join(",");
    if std::fs::read_to_string(&ready).is_ok_and(|made| made == wanted) && dir.is_dir() {
        return dir;
    }
    let _ = std::fs::remove_file(&ready);
    if dir.exists() {
        remove(&dir);
    }
    let mirror = std::env::var("STRONGSYNC_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".into());
    let mut debootstrap = Command::new("debootstrap");
    debootstrap.args(["--variant=minbase"]);
    if !include.is_empty() {
        debootstrap.arg(format!("--include={wanted}"));
    }
    let out = debootstrap
        .args(["bookworm"])
        .arg(&dir)
        .arg(&mirror)
        .output()
        .expect("run debootstrap (Debian: debootstrap)");
    assert!(
        out.status.success(),
        "debootstrap {name} from {mirror}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&ready, wanted).unwrap();
    dir
}

/// A copy of `root` at `to`, to change freely (hard links where the files are not written in
/// place would be cheaper, but a booted system writes in place).
pub fn copy(root: &Path, to: &Path) {
    let out = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(root)
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cp -a {} {}: {}",
        root.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Removes a root (staying on its file system: a root never holds a mount when it is removed).
pub fn remove(dir: &Path) {
    let _ = Command::new("rm")
        .args(["-rf", "--one-file-system"])
        .arg(dir)
        .status();
}

/// Runs `script` with `sh -c` in `root` under chroot, from `/`, with `/proc` and `/dev` as a
/// host's (in a mount namespace of its own, gone with it), and returns its stdout; fails the
/// test, saying what the script printed, if it fails.
pub fn chroot(root: &Path, script: &str) -> String {
    let root_text = root.display().to_string();
    let out = Command::new("unshare")
        .args(["--mount", "--fork", "sh", "-c"])
        .arg(
            "mount -t proc proc \"$1/proc\" && mount --rbind /dev \"$1/dev\" && \
             exec chroot \"$1\" /usr/bin/env -i \
             PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C \
             /bin/sh -c \"$2\"",
        )
        .args(["chroot", &root_text, script])
        .output()
        .expect("unshare and chroot");
    assert!(
        out.status.success(),
        "in {}: {script}\n{}{}",
        root.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
