//! What a case is (requests whose fields are arbitrary text or name something the
//! case made) and the proptest strategy that draws one; [`decode`](fn@super::decode)
//! reads the same from libFuzzer's bytes.

use std::sync::Arc;

use proptest::prelude::*;

use super::MAX_REQUESTS;
use crate::corpus::{self, Mutation, Pick, pick};

/// A field value: arbitrary text, or one that names something that exists.
#[derive(Debug, Clone)]
pub enum Text {
    Any(String),
    /// A run id this case started.
    Run(Pick),
    Good(&'static str),
}

/// A task token: one this case was leased, an older one, a mutated one, or text.
#[derive(Debug, Clone)]
pub enum TokenPick {
    Latest,
    Leased(Pick),
    Mutated(Pick, Vec<Mutation>),
    Any(String),
}

/// One request.
#[derive(Debug, Clone)]
pub enum Op {
    Start {
        workflow: Text,
        run: Text,
        goal: Text,
        context: Vec<(Text, Text)>,
        request_id: Text,
        parent: Text,
        callback: Text,
        queue: Text,
        allow_duplicate: bool,
    },
    Describe(Text),
    History {
        run: Text,
        from: u64,
        page: u32,
    },
    List {
        status: Option<Pick>,
        workflow: Option<Text>,
        parent: Option<Text>,
        after: Option<i64>,
        before: Option<i64>,
        token: Text,
        page: u32,
    },
    Signal {
        run: Text,
        name: Text,
        payload: Text,
        request_id: Text,
    },
    Cancel {
        run: Text,
        reason: Text,
    },
    Terminate {
        run: Text,
        reason: Text,
    },
    Tree(Text),
    Watch {
        run: Text,
        from: u64,
    },
    Poll {
        queue: Text,
    },
    Heartbeat {
        token: TokenPick,
        checkpoint: usize,
        notes: Vec<(Text, Text)>,
        acked: u64,
    },
    Complete {
        token: TokenPick,
        notes: Text,
        artifacts: Vec<Text>,
        context: Vec<(Text, Text)>,
        take_next: bool,
    },
    Fail {
        token: TokenPick,
        error_type: Text,
        message: Text,
        non_retryable: bool,
        checkpoint: usize,
    },
    DescribeQueue(Text),
    GetWorkflow(Text),
    /// Register a definition (its JSON) in the caller's namespace.
    RegisterWorkflow(Text),
}

/// A request and who sends it (`None`: the default namespace and identity).
#[derive(Debug, Clone)]
pub struct Request {
    pub caller: Option<(Text, Text)>,
    pub op: Op,
}

/// One case: a backend and a sequence of requests.
#[derive(Debug, Clone)]
pub struct ServiceInput {
    pub redb: bool,
    pub requests: Vec<Request>,
}

fn text(lines: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Text> {
    prop_oneof![
        3 => corpus::field_text(lines).prop_map(Text::Any),
        2 => pick().prop_map(Text::Run),
        2 => prop_oneof![Just("two"), Just("demo"), Just("default"), Just("q"), Just("a"), Just("steer"), Just("{}"), Just("https://example.com/cb"), Just("reg"), Just(super::REGISTERED)]
            .prop_map(Text::Good),
    ]
}

fn token(lines: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = TokenPick> {
    prop_oneof![
        4 => Just(TokenPick::Latest),
        2 => pick().prop_map(TokenPick::Leased),
        2 => (pick(), prop::collection::vec(corpus::mutation(), 1..3)).prop_map(|(i, m)| TokenPick::Mutated(i, m)),
        1 => corpus::field_text(lines).prop_map(TokenPick::Any),
    ]
}

fn pairs(lines: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Vec<(Text, Text)>> {
    prop::collection::vec((text(lines.clone()), text(lines)), 0..3)
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..64, 1 => Just(8 * 1024 * 1024), 1 => Just(8 * 1024 * 1024 + 1)]
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..20, 1 => any::<u64>(), 1 => Just(u64::MAX)]
}

fn op(l: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Op> {
    let t = || text(l.clone());
    let start = (
        (t(), t(), t(), pairs(l.clone())),
        (t(), t(), t(), t(), prop::bool::weighted(0.1)),
    )
        .prop_map(
            |((workflow, run, goal, context), (request_id, parent, callback, queue, allow_duplicate))| {
                Op::Start {
                    workflow,
                    run,
                    goal,
                    context,
                    request_id,
                    parent,
                    callback,
                    queue,
                    allow_duplicate,
                }
            },
        );
    let list = (
        prop::option::of(pick()),
        prop::option::of(t()),
        prop::option::of(t()),
        prop::option::of(any::<i64>()),
        prop::option::of(any::<i64>()),
        t(),
        any::<u32>(),
    )
        .prop_map(
            |(status, workflow, parent, after, before, token, page)| Op::List {
                status,
                workflow,
                parent,
                after,
                before,
                token,
                page,
            },
        );
    prop_oneof![
        6 => start,
        2 => t().prop_map(Op::Describe),
        2 => (t(), number(), any::<u32>()).prop_map(|(run, from, page)| Op::History { run, from, page: page % 2000 }),
        1 => list,
        3 => (t(), t(), t(), t()).prop_map(|(run, name, payload, request_id)| Op::Signal { run, name, payload, request_id }),
        1 => (t(), t()).prop_map(|(run, reason)| Op::Cancel { run, reason }),
        1 => (t(), t()).prop_map(|(run, reason)| Op::Terminate { run, reason }),
        1 => t().prop_map(Op::Tree),
        1 => (t(), number()).prop_map(|(run, from)| Op::Watch { run, from }),
        5 => t().prop_map(|queue| Op::Poll { queue }),
        3 => (token(l.clone()), size(), pairs(l.clone()), number())
            .prop_map(|(token, checkpoint, notes, acked)| Op::Heartbeat { token, checkpoint, notes, acked }),
        4 => (token(l.clone()), t(), prop::collection::vec(t(), 0..3), pairs(l.clone()), any::<bool>())
            .prop_map(|(token, notes, artifacts, context, take_next)| Op::Complete { token, notes, artifacts, context, take_next }),
        3 => (token(l.clone()), t(), t(), any::<bool>(), size())
            .prop_map(|(token, error_type, message, non_retryable, checkpoint)| Op::Fail { token, error_type, message, non_retryable, checkpoint }),
        1 => t().prop_map(Op::DescribeQueue),
        1 => t().prop_map(Op::GetWorkflow),
        1 => t().prop_map(Op::RegisterWorkflow),
    ]
}

/// Request sequences; `lines` are the corpus's field values.
pub fn strategy(lines: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = ServiceInput> {
    let caller = prop_oneof![6 => Just(None), 1 => (text(lines.clone()), text(lines.clone())).prop_map(Some)];
    let request = (caller, op(lines)).prop_map(|(caller, op)| Request { caller, op });
    (
        prop::bool::weighted(0.3),
        prop::collection::vec(request, 1..=MAX_REQUESTS),
    )
        .prop_map(|(redb, requests)| ServiceInput { redb, requests })
}
