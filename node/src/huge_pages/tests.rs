use super::*;

#[test]
fn after_disable_the_kernel_reports_them_disabled() {
    disable().expect("prctl(PR_SET_THP_DISABLE)");
    assert!(
        rustix::thread::transparent_huge_pages_are_disabled().expect("prctl(PR_GET_THP_DISABLE)")
    );
    assert!(!disable().expect("a second disable"), "already off");
}
