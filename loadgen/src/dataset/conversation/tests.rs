use std::sync::Arc;

use super::*;
use crate::dataset::{Marker, words_for_64_bits};

fn shape(turns: u32, system: u32) -> Shape {
    Shape {
        turns,
        input_len: 12,
        output_len: 4,
        think: Duration::from_millis(5),
        system,
    }
}

const COMPLETIONS: BodyOpts<'static> = BodyOpts {
    api: Api::Completions,
    model: "m",
    ignore_eos: true,
};

fn json(p: &Prompt, m: Option<(&Marker, u64)>) -> serde_json::Value {
    let body = match (m, &p.pieces) {
        (Some((m, session)), Some(pieces)) => m.body(pieces, session, 1000),
        _ => p.body.clone(),
    };
    serde_json::from_slice(&body).unwrap()
}

fn text(p: &Prompt, m: Option<(&Marker, u64)>) -> String {
    json(p, m)["prompt"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn each_turn_repeats_the_previous_prompt_and_adds_an_exchange() {
    let mut s = Shaper::new(None).await.unwrap();
    let (prompts, sessions) = build(shape(3, 0), 7, 1, &mut s, 0, COMPLETIONS)
        .await
        .unwrap();
    // Seven requests of three turns: three conversations.
    assert_eq!(sessions.conversations, 3);
    assert_eq!(prompts.len(), 9);
    assert_eq!(sessions.history, vec![0, 12, 28]);
    for c in 0..3u64 {
        let turns: Vec<String> = (0..3)
            .map(|t| text(&prompts[sessions.prompt_index(c, t)], None))
            .collect();
        for (t, p) in turns.iter().enumerate() {
            assert_eq!(p.split_whitespace().count(), 12 + t * 16, "{p}");
            assert_eq!(
                prompts[sessions.prompt_index(c, t as u32)].input_len,
                Some(12 + t as u32 * 16)
            );
        }
        assert!(turns[1].starts_with(&turns[0]) && turns[2].starts_with(&turns[1]));
    }
    // Session 3 replays conversation 0.
    assert_eq!(sessions.prompt_index(3, 1), sessions.prompt_index(0, 1));
    assert_eq!(sessions.reusable(0, true), 0);
    assert_eq!(sessions.reusable(2, false), 28);
}

#[tokio::test]
async fn sessions_are_marked_apart_and_keep_their_marker_across_turns() {
    let mut s = Shaper::new(None).await.unwrap();
    let words = Arc::new(s.words());
    let n = words_for_64_bits(words.len());
    let (prompts, sessions) = build(shape(3, 0), 6, 1, &mut s, n, COMPLETIONS)
        .await
        .unwrap();
    let m = Marker::new(words.clone(), 7, 0, false);
    // Sessions 0 and 2 replay the same conversation (two in the pool) with their own markers.
    for session in [0u64, 2] {
        let turns: Vec<String> = (0..3)
            .map(|t| {
                text(
                    &prompts[sessions.prompt_index(session, t)],
                    Some((&m, session)),
                )
            })
            .collect();
        assert!(turns[1].starts_with(&turns[0]) && turns[2].starts_with(&turns[1]));
        assert_eq!(turns[2].split_whitespace().count(), 12 + 2 * 16);
    }
    let first = |session: u64| {
        text(
            &prompts[sessions.prompt_index(session, 0)],
            Some((&m, session)),
        )
        .split(' ')
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
    };
    assert_ne!(
        first(0),
        first(2),
        "a replayed conversation is a new session"
    );
    // The next level marks the same session differently.
    let m1 = Marker::new(words, 7, 1, false);
    assert_ne!(
        text(&prompts[0], Some((&m, 0))),
        text(&prompts[0], Some((&m1, 0)))
    );
}

#[tokio::test]
async fn a_system_prompt_is_shared_by_the_sessions_of_a_level() {
    let mut s = Shaper::new(None).await.unwrap();
    let words = Arc::new(s.words());
    let n = words_for_64_bits(words.len());
    let (prompts, sessions) = build(shape(2, 30), 4, 1, &mut s, n, COMPLETIONS)
        .await
        .unwrap();
    assert_eq!(sessions.history, vec![0, 42]);
    assert_eq!(
        (sessions.reusable(0, false), sessions.reusable(0, true)),
        (0, 30)
    );
    let m = Marker::new(words, 7, 0, false);
    let t0 = text(&prompts[sessions.prompt_index(0, 0)], Some((&m, 0)));
    let t1 = text(&prompts[sessions.prompt_index(1, 0)], Some((&m, 1)));
    let head = |t: &str| t.split(' ').take(30).collect::<Vec<_>>().join(" ");
    assert_eq!(head(&t0), head(&t1), "one system prompt");
    assert_ne!(t0, t1);
    assert_eq!(t0.split_whitespace().count(), 42);
}

#[tokio::test]
async fn chat_bodies_alternate_roles() {
    let mut s = Shaper::new(None).await.unwrap();
    let chat = BodyOpts {
        api: Api::Chat,
        model: "m",
        ignore_eos: false,
    };
    let (prompts, sessions) = build(shape(3, 8), 3, 1, &mut s, 0, chat).await.unwrap();
    let v = json(&prompts[sessions.prompt_index(0, 2)], None);
    let roles: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    let words: usize = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().split_whitespace().count())
        .sum();
    assert_eq!(words, 8 + 12 + 2 * 16);
    assert_eq!(v["max_tokens"], 4);
}

#[test]
fn validation_names_the_field() {
    assert_eq!(validate(0, 1, 1, 0).unwrap_err().0, "turns");
    assert_eq!(validate(2, 0, 1, 0).unwrap_err().0, "input_len");
    assert_eq!(validate(2, 1, 0, 0).unwrap_err().0, "output_len");
    assert_eq!(
        validate(2, 1, 1, MAX_THINK_MS + 1).unwrap_err().0,
        "think_time_ms"
    );
    assert!(validate(2, 1, 1, 0).is_ok());
}
