#[test]
fn placeholder() {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap().parent().unwrap();
    let st = std::process::Command::new(env!("CARGO"))
        .args(["build", "--release", "-p", "nvmfs-preload", "-p", "nvmfs-cli", "--target-dir"])
        .arg(target)
        .status()
        .unwrap();
    assert!(st.success());
}
