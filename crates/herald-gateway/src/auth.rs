//! Authorization, deny by default: the channels the bot answers in, the allowlist, approved
//! users, and pairing codes for unknown people writing in a direct message.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use herald_core::{ChatKind, Inbound, Platform};
use herald_store::{NewPairing, PairingIssue, Store, StoreError};
use tracing::info;

use crate::settings::{Access, DmPolicy};

/// Why a user may talk to the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Listed in `allowed_users` (or `"*"`).
    Listed,
    /// Approved by the operator through pairing.
    Paired,
    /// `dm_policy = "open"`.
    Open,
}

/// What to do with an inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Answer it.
    Allowed(Allowed),
    /// An unknown user in a DM under `dm_policy = "pair"`: offer a pairing code.
    Pair,
    /// Drop it silently (and say why in the log).
    Ignore(&'static str),
}

/// Why a stranger's message in a group is dropped.
const UNKNOWN_IN_GROUP: &str = "unknown user in a group";
/// Why a stranger's DM is dropped when only the allowlist counts.
const UNKNOWN_ALLOWLIST: &str = "unknown user, dm_policy is allowlist";

impl Verdict {
    /// Whether the sender is why the message is not answered (not the chat it is in).
    pub fn stranger(&self) -> bool {
        matches!(self, Verdict::Pair | Verdict::Ignore(UNKNOWN_IN_GROUP | UNKNOWN_ALLOWLIST))
    }
}

/// Decides whether a message reaches the agent. Group messages outside `allowed_channels` and
/// unaddressed group chatter are dropped before anything is read from the store.
pub async fn authorize(
    store: &Store,
    access: &Access,
    inbound: &Inbound,
) -> Result<Verdict, StoreError> {
    let group = inbound.chat.kind == ChatKind::Group;
    // A thread's `chat.id` is its parent channel, so listing a channel admits its threads.
    // Checked before the user: a listed user is not answered in a channel left out either.
    if group && !access.admits_channel(&inbound.chat.id) {
        return Ok(Verdict::Ignore("group chat not in allowed_channels"));
    }
    if group && access.require_mention && !inbound.addressed() {
        return Ok(Verdict::Ignore("group message without a mention"));
    }
    if access.lists(&inbound.user.id) {
        return Ok(Verdict::Allowed(Allowed::Listed));
    }
    if store.is_approved(inbound.chat.platform, &inbound.user.id).await? {
        return Ok(Verdict::Allowed(Allowed::Paired));
    }
    Ok(match (group, access.dm_policy) {
        (true, _) => Verdict::Ignore(UNKNOWN_IN_GROUP),
        (false, DmPolicy::Open) => Verdict::Allowed(Allowed::Open),
        (false, DmPolicy::Pair) => Verdict::Pair,
        (false, DmPolicy::Allowlist) => Verdict::Ignore(UNKNOWN_ALLOWLIST),
    })
}

/// Letters and digits nobody confuses when reading a code aloud (no 0/O, 1/I/L).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Code length.
const CODE_LEN: usize = 8;
/// At most this many codes wait for the operator on one platform: enough that a few strangers
/// cannot crowd out the person the operator expects, few enough to read in `pairing list`.
const MAX_PENDING: i64 = 10;
/// A user hears about their code at most this often.
const REMIND_EVERY: Duration = Duration::from_secs(60);

/// A fresh pairing code from the operating system's CSPRNG-seeded generator.
pub fn pairing_code() -> String {
    (0..CODE_LEN).map(|_| char::from(ALPHABET[rand::random_range(0..ALPHABET.len())])).collect()
}

/// Pairing replies, rate-limited per user so that writing again does not flood anyone.
#[derive(Debug, Default)]
pub struct Pairing {
    told: HashMap<(Platform, String), Instant>,
}

impl Pairing {
    /// What to answer an unknown user who wrote in a DM, if anything: nothing when they were
    /// told of the same code a moment ago, unless they `asked` (a slash command, which wants
    /// an answer).
    pub async fn reply(
        &mut self,
        store: &Store,
        inbound: &Inbound,
        ttl: Duration,
        asked: bool,
    ) -> Result<Option<String>, StoreError> {
        let platform = inbound.chat.platform;
        let code = pairing_code();
        let request = NewPairing {
            platform,
            code: &code,
            user_id: &inbound.user.id,
            display_name: inbound.user.name.as_deref(),
            chat_id: &inbound.chat.id,
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            max_pending: MAX_PENDING,
        };
        let issue = store.request_pairing(&request).await?;
        let fresh = matches!(issue, PairingIssue::Issued(_));
        if !self.may_tell(platform, &inbound.user.id, fresh) && !asked {
            return Ok(None);
        }
        Ok(Some(match issue {
            PairingIssue::Issued(request) | PairingIssue::Pending(request) => {
                if fresh {
                    info!(%platform, user = %inbound.user.id, "pairing code issued");
                }
                format!(
                    "I don't know you yet. Your pairing code is {code}. Ask the operator of this \
                     bot to run:\nherald pairing approve {platform} {code}\nThe code is valid \
                     for {minutes} minutes.",
                    code = request.code,
                    minutes = ttl.as_secs().div_ceil(60),
                )
            }
            PairingIssue::Full => {
                info!(%platform, user = %inbound.user.id, "pairing refused: too many pending codes");
                "I don't know you yet, and too many people are waiting for approval right now. \
                 Please try again later."
                    .to_owned()
            }
        }))
    }

    fn may_tell(&mut self, platform: Platform, user: &str, fresh: bool) -> bool {
        let now = Instant::now();
        if self.told.len() > 10_000 {
            self.told.retain(|_, at| now.duration_since(*at) < Duration::from_secs(3600));
        }
        let key = (platform, user.to_owned());
        match self.told.get(&key) {
            Some(at) if !fresh && now.duration_since(*at) < REMIND_EVERY => false,
            _ => {
                self.told.insert(key, now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use herald_core::{Ack, ChatRef, UserRef};
    use herald_store::StoreOptions;

    use super::*;

    /// A message from user `1`, mentioning the bot, in `chat`.
    fn message(chat: ChatRef) -> Inbound {
        Inbound {
            id: "m1".into(),
            chat,
            user: UserRef::new("1"),
            text: "hello".into(),
            mentioned: true,
            reply_to_bot: false,
            ack: Ack::none(),
        }
    }

    #[tokio::test]
    async fn allowed_channels_limit_group_chats_and_their_threads_never_dms() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("state.db"))).await.unwrap();
        let access = Access {
            allowed_users: vec!["1".into()],
            allowed_channels: vec!["10".into(), "11".into()],
            ..Access::default()
        };
        let d = Platform::Discord;
        let verdict =
            async |access: &Access, chat| authorize(&store, access, &message(chat)).await.unwrap();
        let listed = Verdict::Allowed(Allowed::Listed);
        assert_eq!(verdict(&access, ChatRef::group(d, "11")).await, listed);
        assert_eq!(verdict(&access, ChatRef::group(d, "10").in_thread("99")).await, listed);
        assert_eq!(
            verdict(&access, ChatRef::direct(d, "12")).await,
            listed,
            "DMs are not channels"
        );
        let elsewhere = Verdict::Ignore("group chat not in allowed_channels");
        assert_eq!(verdict(&access, ChatRef::group(d, "12")).await, elsewhere);
        assert_eq!(verdict(&access, ChatRef::group(d, "12").in_thread("10")).await, elsewhere);
        let anywhere = Access { allowed_channels: Vec::new(), ..access };
        assert_eq!(verdict(&anywhere, ChatRef::group(d, "12")).await, listed);
    }

    #[test]
    fn codes_use_the_unambiguous_alphabet_and_differ() {
        let a = pairing_code();
        let b = pairing_code();
        assert_eq!(a.len(), CODE_LEN);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)), "{a}");
        assert!(!a.contains(['0', 'O', '1', 'I', 'L']));
        assert_ne!(a, b);
    }

    #[test]
    fn a_user_is_reminded_at_most_once_a_minute() {
        let mut pairing = Pairing::default();
        assert!(pairing.may_tell(Platform::Telegram, "1", true));
        assert!(!pairing.may_tell(Platform::Telegram, "1", false));
        assert!(pairing.may_tell(Platform::Telegram, "2", false));
        assert!(pairing.may_tell(Platform::Telegram, "1", true), "a new code is always told");
    }
}
