//! After a storm: which acknowledged turns the store does not hold whole.

use std::collections::HashSet;

use herald_core::Role;
use herald_store::{Store, StoredMessage};

use crate::worker::Report;

/// Counts the turns the workers acknowledged that are not stored whole in their session.
pub async fn lost_turns(store: &Store, reports: &[Report]) -> anyhow::Result<u64> {
    let mut lost = 0;
    for session in reports.iter().flat_map(|r| &r.sessions) {
        let stored = whole_turns(&store.history(&session.id).await?);
        lost += session.turns.iter().filter(|t| !stored.contains(t)).count() as u64;
    }
    Ok(lost)
}

/// The turn numbers of `history` that are stored whole: the inbound message (its platform id
/// ends in `:<turn>`), the assistant's call, the result of that very call, and the answer.
fn whole_turns(history: &[StoredMessage]) -> HashSet<u32> {
    history
        .windows(4)
        .filter_map(|w| {
            let [user, call, result, answer] = w else { return None };
            let turn = user.platform_message_id.as_deref()?.rsplit_once(':')?.1.parse().ok()?;
            let called = call.tool_calls.as_ref()?.get(0)?.get("id")?.as_str()?;
            let whole = user.role == Role::User
                && call.role == Role::Assistant
                && result.role == Role::Tool
                && result.tool_call_id.as_deref() == Some(called)
                && answer.role == Role::Assistant
                && answer.tool_calls.is_none();
            whole.then_some(turn)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::Turn;

    fn stored(turn: u32, messages: Vec<herald_store::NewMessage>) -> Vec<StoredMessage> {
        messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| StoredMessage {
                id: i64::from(turn) * 4 + i as i64,
                session_id: "s".into(),
                role: m.role,
                content: m.content,
                tool_calls: m.tool_calls,
                tool_call_id: m.tool_call_id,
                tool_name: m.tool_name,
                platform_message_id: (i == 0).then(|| format!("s:{turn}")),
                token_count: None,
                created_at: 0,
            })
            .collect()
    }

    #[test]
    fn only_whole_turns_count() {
        let rng = &mut rand::rng();
        let mut history = stored(0, Turn::synthetic(rng).messages());
        history.extend(stored(1, Turn::synthetic(rng).messages()));
        // Turn 2 lost its reply; turn 3 answers a call it did not make.
        history.extend(stored(2, Turn::synthetic(rng).messages()).into_iter().take(1));
        let mut wrong = stored(3, Turn::synthetic(rng).messages());
        wrong[2].tool_call_id = Some("call_other".into());
        history.extend(wrong);
        assert_eq!(whole_turns(&history), HashSet::from([0, 1]));
    }
}
