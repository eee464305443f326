use super::*;

const TIMEOUT: Duration = Duration::from_millis(1_000);

fn leader(term: u64) -> Leadership {
    Leadership {
        leader: Some(1),
        is_leader: true,
        term,
    }
}

fn follower(term: u64) -> Leadership {
    Leadership {
        leader: Some(2),
        is_leader: false,
        term,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn an_idle_leader_takes_over_its_term_and_an_idle_follower_stays() {
    assert_eq!(
        decide(Duty::Idle, leader(5), ms(0), TIMEOUT),
        Step::TakeOver { term: 5 }
    );
    assert_eq!(decide(Duty::Idle, follower(5), ms(0), TIMEOUT), Step::Stay);
}

#[test]
fn leader_then_follower_then_leader_again_is_two_take_overs_not_one() {
    // leader(t5) -> follower(t6) -> leader(t7) between two checks: the term decides.
    let serving = Duty::Serving { term: 5 };
    assert_eq!(
        decide(serving, leader(7), ms(10), TIMEOUT),
        Step::Release(ReleaseReason::NewTerm)
    );
    assert_eq!(
        decide(Duty::Idle, leader(7), ms(10), TIMEOUT),
        Step::TakeOver { term: 7 }
    );
}

#[test]
fn a_serving_node_that_is_no_longer_leader_releases() {
    assert_eq!(
        decide(Duty::Serving { term: 5 }, follower(5), ms(10), TIMEOUT),
        Step::Release(ReleaseReason::NotLeader)
    );
}

#[test]
fn quorum_age_beyond_the_timeout_releases_and_within_it_stays() {
    let serving = Duty::Serving { term: 3 };
    assert_eq!(decide(serving, leader(3), ms(999), TIMEOUT), Step::Stay);
    assert_eq!(
        decide(serving, leader(3), ms(1_001), TIMEOUT),
        Step::Release(ReleaseReason::QuorumLost)
    );
}

#[test]
fn only_a_leader_cut_off_from_the_broker_for_longer_than_the_timeout_hands_over() {
    assert!(should_hand_over(leader(2), Some(ms(1_001)), TIMEOUT));
    assert!(!should_hand_over(leader(2), Some(ms(999)), TIMEOUT));
    assert!(!should_hand_over(leader(2), None, TIMEOUT));
    assert!(!should_hand_over(follower(2), Some(ms(60_000)), TIMEOUT));
}

#[test]
fn the_age_is_the_fresher_of_openraft_report_and_our_own_confirmation() {
    let quorum = QuorumAge::confirmed_now();
    // A stale report does not outweigh a confirmation made just now...
    assert!(quorum.age(Some(ms(60_000))) < ms(1_000));
    // ...and a fresh report counts even when our own confirmation is older.
    assert_eq!(quorum.age(Some(ms(0))), ms(0));
    let old = QuorumAge {
        confirmed_at: Instant::now() - ms(5_000),
    };
    assert!(old.age(None) >= ms(5_000));
    assert_eq!(old.age(Some(ms(20))), ms(20));
}

/// On a paused Tokio clock the age is exactly the time advanced: the duty timing reads
/// Tokio's clock (the one openraft reports quorum acknowledgements on), not the OS's.
#[tokio::test(start_paused = true)]
async fn the_quorum_age_runs_on_the_tokio_clock_and_releases_past_the_timeout() {
    let mut quorum = QuorumAge::confirmed_now();
    tokio::time::advance(ms(700)).await;
    assert_eq!(quorum.age(None), ms(700));
    assert_eq!(quorum.age(Some(ms(200))), ms(200));
    let serving = Duty::Serving { term: 4 };
    assert_eq!(
        decide(serving, leader(4), quorum.age(None), TIMEOUT),
        Step::Stay
    );
    tokio::time::advance(ms(301)).await;
    assert_eq!(
        decide(serving, leader(4), quorum.age(None), TIMEOUT),
        Step::Release(ReleaseReason::QuorumLost)
    );
    // A probe's confirmation starts the age again.
    quorum.confirm();
    assert_eq!(quorum.age(None), ms(0));
    assert_eq!(
        decide(serving, leader(4), quorum.age(None), TIMEOUT),
        Step::Stay
    );
}
