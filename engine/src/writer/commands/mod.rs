//! The writer's commands: one type per file (a schedule's or a trigger's in a
//! folder of their own), each applied through a [`Cx`], and the closed [`Command`]
//! enum the writer queue carries.
//!
//! Adding a command is a new file here with a type implementing [`Apply`], and one
//! line in the `commands!` list at the end of this file: the file's module and its
//! type. The macro declares the module, re-exports it and makes the type a variant
//! of [`Command`]. Callers send it with [`Writer::call`](super::Writer::call).

use super::cx::{Attempt, ClosedRun, Cx};
use super::*;
use railyard_model::trace::TraceContext;

/// Tells what started each run that closed in this command, in the same
/// transaction: its schedule, and the trigger key it held (one of a close's three
/// hooks: see `cx.rs`). What it starts cannot close another run at once, so it ends.
pub(crate) fn settle(cx: &mut Cx) -> Result<(), StorageError> {
    while !cx.closed.is_empty() {
        for c in std::mem::take(cx.closed) {
            if !c.schedule_id.is_empty() {
                schedule::run_closed(cx, &c)?;
            }
            trigger::run_closed(cx, &c)?;
        }
    }
    Ok(())
}

/// Why a command was not applied.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command is refused: it wrote nothing, and its caller gets the refusal.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// Storage failed: the whole batch fails, and every caller in it gets the error.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A command's result with its refusal as a value: what a command that applies
/// another (a batch's item, a schedule's fire, a child's start) looks at, while a
/// storage error still fails the batch.
pub(crate) trait Refusable<T> {
    /// `Ok(Err(refusal))` for a refused command; `Err` only for storage.
    fn refused(self) -> Result<Result<T, Rejection>, StorageError>;
}

impl<T> Refusable<T> for Result<T, CommandError> {
    fn refused(self) -> Result<Result<T, Rejection>, StorageError> {
        match self {
            Ok(v) => Ok(Ok(v)),
            Err(CommandError::Rejected(r)) => Ok(Err(r)),
            Err(CommandError::Storage(e)) => Err(e),
        }
    }
}

/// A lease handed out in an answer: its run, and the lease's sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    pub run: RunKey,
    pub lease: u64,
}

/// One writer command.
pub trait Apply: Sized + Send + 'static {
    /// What the caller gets back.
    type Output: Send + 'static;

    /// The command's name: the label of its span and its metric.
    const NAME: &'static str;

    /// Applies the command inside the open transaction. A refused command must
    /// write nothing, so every check comes before the first save; a storage error
    /// fails the whole batch.
    fn apply(self, cx: &mut Cx) -> Result<Self::Output, CommandError>;

    /// The lease an accepted answer hands out, if any: if its caller is gone when
    /// the commit finishes, the writer ends that lease at once.
    fn handed(_output: &Self::Output) -> Option<Handed> {
        None
    }
}

/// A caller's answer, held until commit.
pub(super) struct Answer {
    pub(super) name: &'static str,
    /// Whether the command was accepted (it may still fail with its batch).
    pub(super) accepted: bool,
    /// Given the storage error if the batch failed; returns a follow-up command
    /// when the answer carried a lease that its caller was no longer there to take.
    pub(super) send: Box<dyn FnOnce(Option<WriteError>) -> Option<Command> + Send>,
}

/// Builds the answer of command `C`; `result` is `None` when the command was not
/// applied because its batch had already failed.
fn answer<C: Apply>(reply: Option<Reply<C::Output>>, result: Option<Result<C::Output, Rejection>>) -> Answer {
    let accepted = matches!(result, Some(Ok(_)));
    Answer {
        name: C::NAME,
        accepted,
        send: Box::new(move |storage_error| {
            let leased = match (&storage_error, &result) {
                (None, Some(Ok(value))) => C::handed(value),
                _ => None,
            };
            let result = match (storage_error, result) {
                (Some(e), _) => Err(e),
                (None, Some(r)) => r.map_err(WriteError::from),
                (None, None) => Err(WriteError::Internal(format!("{} was not applied", C::NAME))),
            };
            let delivered = match reply {
                Some(reply) => reply.send(result).is_ok(),
                // The writer's own command: nobody waits for it.
                None => true,
            };
            let handed = leased.filter(|_| !delivered)?;
            let (run_id, lease) = (&handed.run.run_id, handed.lease);
            tracing::warn!(%run_id, lease, "a leased step's caller was gone when the commit finished");
            Some(Command::Undelivered(Undelivered(handed), None))
        }),
    }
}

/// Applies one command: its answer, and the storage error that failed it, if any.
fn run<C: Apply>(c: C, reply: Option<Reply<C::Output>>, cx: &mut Cx) -> (Answer, Option<StorageError>) {
    match c.apply(cx) {
        Ok(output) => (answer::<C>(reply, Some(Ok(output))), None),
        Err(CommandError::Rejected(r)) => (answer::<C>(reply, Some(Err(r))), None),
        Err(CommandError::Storage(e)) => (answer::<C>(reply, None), Some(e)),
    }
}

macro_rules! commands {
    ($($module:ident: $($ty:ident),+;)*) => {
        $(
            pub(crate) mod $module;
            pub use self::$module::*;
        )*

        /// Every mutation the writer applies, with where its answer goes (`None`
        /// for the writer's own follow-ups).
        pub enum Command {
            $($($ty($ty, Option<Reply<<$ty as Apply>::Output>>),)+)*
        }

        impl Command {
            /// The command's name, as in its span and metric.
            pub(crate) fn name(&self) -> &'static str {
                match self {
                    $($(Command::$ty(..) => <$ty as Apply>::NAME,)+)*
                }
            }

            /// Applies the command in the open transaction.
            pub(super) fn apply(self, cx: &mut Cx) -> (Answer, Option<StorageError>) {
                match self {
                    $($(Command::$ty(c, reply) => run(c, reply, cx),)+)*
                }
            }

            /// The answer of a command its batch never got to (the batch failed).
            pub(super) fn unapplied(self) -> Answer {
                match self {
                    $($(Command::$ty(_, reply) => answer::<$ty>(reply, None),)+)*
                }
            }
        }

        $($(impl From<($ty, Reply<<$ty as Apply>::Output>)> for Command {
            fn from((c, reply): ($ty, Reply<<$ty as Apply>::Output>)) -> Self {
                Command::$ty(c, Some(reply))
            }
        })+)*
    };
}

// Every command, a line per module: the module (a file, or a folder of them) and
// the command types it defines, each a variant of `Command` of the same name.
commands! {
    approve: AnswerApproval;
    batch: AdvanceBatch, CreateBatch, PurgeBatches, StopBatch;
    children: SpawnChildren;
    complete: Complete;
    create_api_key: CreateApiKey;
    create_namespace: CreateNamespace;
    delete_namespace: DeleteNamespace;
    delivery: RecordDelivery, Redeliver, Subscribe, Unsubscribe;
    fail: Fail;
    fire_timers: FireTimers;
    heartbeat: Heartbeat;
    key_rule: ChangeKeyRule;
    lease: LeaseTask;
    namespace_attributes: ChangeAttribute;
    park: ParkRateLimited;
    pause: PauseRun;
    purge: PurgeRuns;
    register_workflow: RegisterWorkflow;
    report_issue: ReportIssue;
    reset: ResetRun;
    revoke_api_key: RevokeApiKey;
    schedule: CreateSchedule, DeleteSchedule, PatchSchedule, UpdateSchedule;
    signal: Signal;
    start: StartCommand;
    start_replacing: StartReplacing;
    stop: StopRun;
    trigger: CreateTrigger, DeleteTrigger, DeliverHook, PurgeHookDeliveries, RecordPoll, SyncConfigTriggers, UpdateTrigger;
    undelivered: Undelivered;
    update_namespace: UpdateNamespace;
    upsert_attributes: UpsertAttributes;
}
