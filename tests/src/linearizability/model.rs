//! The sequential specification of one state store key: what each request returns and leaves
//! behind when it runs alone on a given state (expiry and fencing tokens are not modelled).

use super::history::{Condition, Input, Output};

/// The state of one key: absent, or its value.
pub type State<V = Vec<u8>> = Option<V>;

/// Runs `input` on `state` alone: returns the reply and the key's next state. Generic over the
/// value type because only value equality matters (the checker runs it on interned ids).
pub fn step<V: PartialEq + Clone>(state: &State<V>, input: &Input<V>) -> (Output<V>, State<V>) {
    match input {
        Input::Set { value, condition } => {
            let applies = match condition {
                Condition::Always => true,
                Condition::Nx => state.is_none(),
                Condition::Nex => state.as_ref().is_none_or(|current| current == value),
            };
            if applies {
                (Output::Set { applied: true }, Some(value.clone()))
            } else {
                (Output::Set { applied: false }, state.clone())
            }
        }
        Input::Get => (
            Output::Get {
                value: state.clone(),
            },
            state.clone(),
        ),
        Input::Del => match state {
            Some(_) => (Output::Del { count: 1 }, None),
            None => (Output::Del { count: 0 }, None),
        },
        Input::VDel { value } => match state {
            None => (Output::VDel { result: 0 }, None),
            Some(current) if current == value => (Output::VDel { result: 1 }, None),
            Some(_) => (Output::VDel { result: -1 }, state.clone()),
        },
    }
}

/// Runs `input` on `state` and checks the reply: the next state if the operation can return
/// `output` there (any reply is accepted when `output` is `None`, an unknown outcome), `None`
/// if it cannot.
pub fn step_checked<V: PartialEq + Clone>(
    state: &State<V>,
    input: &Input<V>,
    output: Option<&Output<V>>,
) -> Option<State<V>> {
    let (actual, next) = step(state, input);
    match output {
        Some(expected) if *expected != actual => None,
        _ => Some(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(value: u8, condition: Condition) -> Input<u8> {
        Input::Set { value, condition }
    }

    #[test]
    fn set_conditions() {
        let applied = Output::Set { applied: true };
        let refused = Output::Set { applied: false };
        assert_eq!(
            step(&None, &set(1, Condition::Always)),
            (applied.clone(), Some(1))
        );
        assert_eq!(
            step(&Some(2), &set(1, Condition::Always)),
            (applied.clone(), Some(1))
        );
        assert_eq!(
            step(&None, &set(1, Condition::Nx)),
            (applied.clone(), Some(1))
        );
        assert_eq!(
            step(&Some(1), &set(1, Condition::Nx)),
            (refused.clone(), Some(1))
        );
        assert_eq!(
            step(&None, &set(1, Condition::Nex)),
            (applied.clone(), Some(1))
        );
        assert_eq!(step(&Some(1), &set(1, Condition::Nex)), (applied, Some(1)));
        assert_eq!(step(&Some(2), &set(1, Condition::Nex)), (refused, Some(2)));
    }

    #[test]
    fn reads_and_deletes() {
        assert_eq!(
            step(&Some(3u8), &Input::Get),
            (Output::Get { value: Some(3) }, Some(3))
        );
        assert_eq!(
            step::<u8>(&None, &Input::Get),
            (Output::Get { value: None }, None)
        );
        assert_eq!(
            step(&Some(3u8), &Input::Del),
            (Output::Del { count: 1 }, None)
        );
        assert_eq!(
            step::<u8>(&None, &Input::Del),
            (Output::Del { count: 0 }, None)
        );
        let vdel = |value| Input::VDel { value };
        assert_eq!(
            step(&Some(3u8), &vdel(3)),
            (Output::VDel { result: 1 }, None)
        );
        assert_eq!(
            step(&Some(3u8), &vdel(4)),
            (Output::VDel { result: -1 }, Some(3))
        );
        assert_eq!(step(&None, &vdel(4u8)), (Output::VDel { result: 0 }, None));
    }

    #[test]
    fn checked_step_accepts_any_reply_when_unknown() {
        let get = Input::Get;
        assert_eq!(step_checked(&Some(1u8), &get, None), Some(Some(1)));
        let wrong = Output::Get { value: Some(2) };
        assert_eq!(step_checked(&Some(1u8), &get, Some(&wrong)), None);
    }
}
