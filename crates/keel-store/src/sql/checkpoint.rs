//! The [`Checkpointer`] of a [`SqlStore`]: checkpoint writes (a compare-and-swap on the
//! thread's head row, then the step and its message entries, in one transaction) and the
//! reads of one step, a branch or the whole tree.

use keel_core::state::MessageOp;
use keel_core::store::{Checkpoint, CheckpointWrite, Checkpointer, PutOutcome, StoreError};
use serde_json::{Map, Value};
use sqlx::{ColumnIndex, Decode, Encode, Executor, IntoArguments, Transaction, Type};

use super::{
    BRANCH_FROM, COPY_THREAD, DELETE_THREAD, Dialect, ENTRIES_AT, ENTRY_FORK, ENTRY_INSERT,
    ENTRY_RETIRE, ENTRY_RETIRE_ALL, ENTRY_REWRITE, HEAD_ADVANCE, HEAD_CREATE, HEAD_FORK, HEAD_ROW,
    HEAD_SET, LATEST_STEP, LatestRow, NEXT_POSITION, PAGE_ENTRIES, PAGE_STEPS, STEP_AT,
    STEP_INSERT, SqlStore, StepTuple, TREE_SEQS, VALUES_UPTO, backend, check_write, decode_latest,
    decode_steps, encode_message, encode_values, fold_values, is_unique_violation, merge_values,
    next_seq,
};
use crate::check;

/// The head row as a step's compare-and-swap leaves it.
struct Head {
    /// The branch's next free position before this step.
    next_position: i64,
    /// The head's values (JSON) before this step.
    state_values: String,
    /// The branch the head is on, which the step extends.
    branch: i64,
}

/// A `checkpoint_steps` row to insert.
struct NewStep<'a> {
    seq: i64,
    run_id: &'a str,
    node: &'a str,
    /// JSON: the values the step sets (a fork's first step: every value of its state).
    values_set: &'a str,
    created_at_ms: i64,
    parent_seq: Option<i64>,
    branch: i64,
    depth: i64,
}

/// The live entry of a message on a branch.
struct LiveEntry {
    position: i64,
    added_seq: i64,
}

/// A `checkpoint_entries` row to insert, live from `added_seq` on.
struct NewEntry<'a> {
    position: i64,
    added_seq: i64,
    message_id: &'a str,
    body: &'a str,
    branch: i64,
}

/// The JSON of every message a write upserts, by op (`None` for a removal).
fn encode_bodies(write: &CheckpointWrite) -> Result<Vec<Option<String>>, StoreError> {
    write
        .update
        .messages
        .iter()
        .map(|op| match op {
            MessageOp::Upsert { message } => encode_message(message).map(Some),
            _ => Ok(None),
        })
        .collect()
}

/// The answer to a write that stored step `seq`.
fn saved(seq: i64) -> Result<PutOutcome, StoreError> {
    Ok(PutOutcome::Saved {
        seq: check::to_u64("seq", seq)?,
    })
}

impl<DB: Dialect> SqlStore<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'a, 'q> &'a str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
{
    /// Starts a fork's branch `seq` from step `from_seq` of branch `from_branch`: the
    /// branch gets that step's messages, and its values with the write's updates on
    /// top. Returns the branch's first free message position and its values, encoded.
    async fn seed_branch(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        seq: i64,
        from_branch: i64,
        from_seq: i64,
        write: &CheckpointWrite,
    ) -> Result<(i64, String), StoreError> {
        let (start_position,): (i64,) = sqlx::query_as(NEXT_POSITION)
            .bind(thread_id)
            .fetch_one(&mut **tx)
            .await
            .map_err(backend)?;
        // The branch starts from `from`'s messages and values.
        sqlx::query(ENTRY_FORK)
            .bind(thread_id)
            .bind(seq)
            .bind(from_branch)
            .bind(from_seq)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        let prior: Vec<(String,)> = sqlx::query_as(VALUES_UPTO)
            .bind(thread_id)
            .bind(from_seq)
            .bind(from_branch)
            .fetch_all(&mut **tx)
            .await
            .map_err(backend)?;
        let mut values = fold_values(&prior)?;
        values.extend(
            write
                .update
                .values
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        Ok((start_position, encode_values(&values)?))
    }

    /// The answer to a write that lost the compare-and-swap, once its transaction is gone.
    async fn conflict(&self, thread_id: &str) -> Result<PutOutcome, StoreError> {
        Ok(PutOutcome::Conflict {
            head: self.head_seq(thread_id).await?,
        })
    }

    /// The depth of a step after `parent`. Read before the swap: a step, once written,
    /// never changes.
    async fn depth_after(&self, thread_id: &str, parent: Option<i64>) -> Result<i64, StoreError> {
        Ok(match parent {
            None => 0,
            Some(p) => self
                .step_at(thread_id, p)
                .await?
                .map_or(p + 1, |(_, d)| d + 1),
        })
    }

    /// The compare-and-swap of `put` on the head row: under concurrent writers exactly
    /// one moves it from `parent` to `seq` (or creates it, for a thread's first step);
    /// the others change nothing and get `None`.
    async fn advance_head(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        seq: i64,
        parent: Option<i64>,
    ) -> Result<Option<Head>, StoreError> {
        let head: Option<(i64, String, i64)> = match parent {
            None => {
                let done = sqlx::query(HEAD_CREATE)
                    .bind(thread_id)
                    .execute(&mut **tx)
                    .await
                    .map_err(backend)?;
                (DB::rows_affected(&done) == 1).then(|| (0, "{}".to_owned(), 0))
            }
            Some(parent) => sqlx::query_as(HEAD_ADVANCE)
                .bind(thread_id)
                .bind(seq)
                .bind(parent)
                .fetch_optional(&mut **tx)
                .await
                .map_err(backend)?,
        };
        Ok(head.map(|(next_position, state_values, branch)| Head {
            next_position,
            state_values,
            branch,
        }))
    }

    /// Inserts a step's row.
    async fn insert_step(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        step: NewStep<'_>,
    ) -> Result<(), StoreError> {
        sqlx::query(STEP_INSERT)
            .bind(thread_id)
            .bind(step.seq)
            .bind(step.run_id)
            .bind(step.node)
            .bind(step.values_set)
            .bind(step.created_at_ms)
            .bind(step.parent_seq)
            .bind(step.branch)
            .bind(step.depth)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Moves the head's next position and values on, when the step changed either.
    async fn update_head(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        head: &Head,
        next_position: i64,
        set: &Map<String, Value>,
    ) -> Result<(), StoreError> {
        if next_position == head.next_position && set.is_empty() {
            return Ok(());
        }
        let values = merge_values(&head.state_values, set)?;
        Self::set_head(tx, thread_id, next_position, &values).await
    }

    /// Writes the head's next position and values.
    async fn set_head(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        next_position: i64,
        values: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(HEAD_SET)
            .bind(thread_id)
            .bind(next_position)
            .bind(values)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Applies a checked write's message ops to branch `branch` as step `seq`, inside the
    /// step's transaction; returns the branch's next free position.
    async fn write_ops(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        branch: i64,
        seq: i64,
        mut next_position: i64,
        write: &CheckpointWrite,
        bodies: &[Option<String>],
    ) -> Result<i64, StoreError> {
        for ((i, op), body) in write.update.messages.iter().enumerate().zip(bodies) {
            let id = match op {
                MessageOp::Upsert { message } => message.id(),
                MessageOp::Remove { id } => id.as_str(),
                MessageOp::RemoveAll => {
                    Self::retire_all(tx, thread_id, branch, seq).await?;
                    continue;
                }
            };
            let live = Self::live_entry(tx, thread_id, id, branch).await?;
            let entry = |position, body| NewEntry {
                position,
                added_seq: seq,
                message_id: id,
                body,
                branch,
            };
            match (body, live) {
                // A version written by this same step was never visible: rewrite it.
                (Some(body), Some(live)) if live.added_seq == seq => {
                    Self::rewrite_entry(tx, thread_id, &live, body).await?;
                }
                (_, Some(live)) => {
                    Self::retire_entry(tx, thread_id, &live, seq).await?;
                    if let Some(body) = body {
                        Self::insert_entry(tx, thread_id, entry(live.position, body)).await?;
                    }
                }
                (Some(body), None) => {
                    Self::insert_entry(tx, thread_id, entry(next_position, body)).await?;
                    next_position += 1;
                }
                (None, None) => {
                    // Dropping the transaction rolls the whole step back.
                    return Err(StoreError::Invalid(format!(
                        "update.messages[{i}] removes message {id:?}, which is not in the state"
                    )));
                }
            }
        }
        Ok(next_position)
    }

    /// Closes every live entry of branch `branch` at step `seq`.
    async fn retire_all(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        branch: i64,
        seq: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(ENTRY_RETIRE_ALL)
            .bind(thread_id)
            .bind(seq)
            .bind(branch)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// The live entry of message `id` on branch `branch`, if there is one.
    async fn live_entry(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        id: &str,
        branch: i64,
    ) -> Result<Option<LiveEntry>, StoreError> {
        let live: Option<(i64, i64)> = sqlx::query_as(DB::QUERIES.entry_live)
            .bind(thread_id)
            .bind(id)
            .bind(branch)
            .fetch_optional(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(live.map(|(position, added_seq)| LiveEntry {
            position,
            added_seq,
        }))
    }

    /// Replaces the body of an entry in place.
    async fn rewrite_entry(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        live: &LiveEntry,
        body: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(ENTRY_REWRITE)
            .bind(thread_id)
            .bind(live.position)
            .bind(live.added_seq)
            .bind(body)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Closes a live entry at step `seq`.
    async fn retire_entry(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        live: &LiveEntry,
        seq: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(ENTRY_RETIRE)
            .bind(thread_id)
            .bind(live.position)
            .bind(live.added_seq)
            .bind(seq)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Inserts an entry.
    async fn insert_entry(
        tx: &mut Transaction<'static, DB>,
        thread_id: &str,
        entry: NewEntry<'_>,
    ) -> Result<(), StoreError> {
        sqlx::query(ENTRY_INSERT)
            .bind(thread_id)
            .bind(entry.position)
            .bind(entry.added_seq)
            .bind(entry.message_id)
            .bind(entry.body)
            .bind(entry.branch)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// The branch and depth of step `seq`, if the thread holds it.
    async fn step_at(&self, thread_id: &str, seq: i64) -> Result<Option<(i64, i64)>, StoreError> {
        sqlx::query_as(STEP_AT)
            .bind(thread_id)
            .bind(seq)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)
    }

    /// Up to `limit` checkpoints of branch `branch` with a seq up to `upto`, newest
    /// first, each with its full state.
    async fn segment(
        &self,
        thread_id: &str,
        branch: i64,
        upto: i64,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let mut steps: Vec<StepTuple> = sqlx::query_as(PAGE_STEPS)
            .bind(thread_id)
            .bind(branch)
            .bind(upto)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        steps.reverse();
        let (Some(lo), Some(hi)) = (steps.first().map(|s| s.0), steps.last().map(|s| s.0)) else {
            return Ok(Vec::new());
        };
        let prior: Vec<(String,)> = sqlx::query_as(VALUES_UPTO)
            .bind(thread_id)
            .bind(lo - 1)
            .bind(branch)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        // Read after the steps: every entry a listed step needs is committed, and a later
        // writer's entries start after `hi`.
        let entries: Vec<(i64, Option<i64>, String)> = sqlx::query_as(PAGE_ENTRIES)
            .bind(thread_id)
            .bind(hi)
            .bind(lo)
            .bind(branch)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let mut page = decode_steps(
            fold_values(&prior)?,
            steps.into_iter().map(Into::into).collect(),
            entries.into_iter().map(Into::into).collect(),
        )?;
        page.reverse();
        Ok(page)
    }
}

#[async_trait::async_trait]
impl<DB: Dialect> Checkpointer for SqlStore<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'a, 'q> &'a str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
{
    async fn put(&self, thread_id: &str, write: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        check_write(thread_id, &write)?;
        let seq = next_seq(write.parent)?;
        let values_set = encode_values(&write.update.values)?;
        let bodies = encode_bodies(&write)?;
        let parent = write
            .parent
            .map(|p| check::to_i64("checkpoint parent", p))
            .transpose()?;
        let depth = self.depth_after(thread_id, parent).await?;
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let Some(head) = Self::advance_head(&mut tx, thread_id, seq, parent).await? else {
            drop(tx);
            return self.conflict(thread_id).await;
        };
        let step = NewStep {
            seq,
            run_id: &write.run_id,
            node: &write.node,
            values_set: &values_set,
            created_at_ms: write.created_at_ms,
            parent_seq: parent,
            branch: head.branch,
            depth,
        };
        Self::insert_step(&mut tx, thread_id, step).await?;
        let next_position = Self::write_ops(
            &mut tx,
            thread_id,
            head.branch,
            seq,
            head.next_position,
            &write,
            &bodies,
        )
        .await?;
        Self::update_head(
            &mut tx,
            thread_id,
            &head,
            next_position,
            &write.update.values,
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        saved(seq)
    }

    async fn fork(
        &self,
        thread_id: &str,
        from: u64,
        write: CheckpointWrite,
    ) -> Result<PutOutcome, StoreError> {
        check_write(thread_id, &write)?;
        if write.parent == Some(from) {
            return self.put(thread_id, write).await;
        }
        let not_held = || {
            StoreError::Invalid(format!(
                "checkpoint {from} is not a checkpoint of thread {thread_id:?}"
            ))
        };
        let Some(parent) = write.parent else {
            return match self.head_seq(thread_id).await? {
                Some(head) => Ok(PutOutcome::Conflict { head: Some(head) }),
                None => Err(not_held()),
            };
        };
        let parent = check::to_i64("checkpoint parent", parent)?;
        let from_seq = i64::try_from(from).map_err(|_| not_held())?;
        let seq = next_seq(write.parent)?;
        let bodies = encode_bodies(&write)?;
        let Some((from_branch, from_depth)) = self.step_at(thread_id, from_seq).await? else {
            return Err(not_held());
        };
        let mut tx = self.pool.begin().await.map_err(backend)?;
        // The same compare-and-swap as `put`: one writer per head, fork or not. It is the
        // transaction's first statement, as in `put`: on SQLite a transaction that reads
        // first and writes second cannot wait for another writer (its snapshot is stale)
        // and fails as "database is locked".
        let swapped: Option<(i64,)> = sqlx::query_as(HEAD_FORK)
            .bind(thread_id)
            .bind(seq)
            .bind(parent)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        if swapped.is_none() {
            drop(tx);
            return self.conflict(thread_id).await;
        }
        let (start_position, values) =
            Self::seed_branch(&mut tx, thread_id, seq, from_branch, from_seq, &write).await?;
        let step = NewStep {
            seq,
            run_id: &write.run_id,
            node: &write.node,
            values_set: &values,
            created_at_ms: write.created_at_ms,
            parent_seq: Some(from_seq),
            branch: seq,
            depth: from_depth + 1,
        };
        Self::insert_step(&mut tx, thread_id, step).await?;
        let next_position = Self::write_ops(
            &mut tx,
            thread_id,
            seq,
            seq,
            start_position,
            &write,
            &bodies,
        )
        .await?;
        Self::set_head(&mut tx, thread_id, next_position, &values).await?;
        tx.commit().await.map_err(backend)?;
        saved(seq)
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        check::text("thread_id", thread_id)?;
        let row: Option<LatestRow> = sqlx::query_as(LATEST_STEP)
            .bind(thread_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        let Some(row) = row else {
            return Ok(None);
        };
        // The state at the head's seq, whatever a concurrent writer commits meanwhile.
        let bodies: Vec<(String,)> = sqlx::query_as(ENTRIES_AT)
            .bind(thread_id)
            .bind(row.0)
            .bind(row.7)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        decode_latest(row, &bodies).map(Some)
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        let mut all = self.branch_page(thread_id, None, None, usize::MAX).await?;
        all.reverse();
        Ok(all)
    }

    async fn history_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.branch_page(thread_id, None, before, limit).await
    }

    async fn branch_page(
        &self,
        thread_id: &str,
        tip: Option<u64>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        check::text("thread_id", thread_id)?;
        let mut page = Vec::new();
        if limit == 0 || before == Some(0) {
            return Ok(page);
        }
        let start: Option<(i64, i64)> = match tip {
            None => sqlx::query_as(HEAD_ROW)
                .bind(thread_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?,
            Some(tip) => match i64::try_from(tip) {
                Ok(tip) => self.step_at(thread_id, tip).await?.map(|(b, _)| (tip, b)),
                Err(_) => None,
            },
        };
        let Some((mut cut, mut branch)) = start else {
            return Ok(page);
        };
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        while page.len() < limit {
            let upto = cut.min(before - 1);
            let segment = self
                .segment(thread_id, branch, upto, limit - page.len())
                .await?;
            page.extend(segment);
            if page.len() >= limit {
                break;
            }
            // On to the checkpoint this branch forked from, on its own branch.
            let from: Option<(Option<i64>,)> = sqlx::query_as(BRANCH_FROM)
                .bind(thread_id)
                .bind(branch)
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?;
            let Some((Some(from),)) = from else { break };
            let Some((from_branch, _)) = self.step_at(thread_id, from).await? else {
                break;
            };
            if from_branch == branch {
                break;
            }
            (cut, branch) = (from, from_branch);
        }
        Ok(page)
    }

    async fn tree_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        check::text("thread_id", thread_id)?;
        let mut page = Vec::new();
        if limit == 0 || before == Some(0) {
            return Ok(page);
        }
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let seqs: Vec<(i64, i64)> = sqlx::query_as(TREE_SEQS)
            .bind(thread_id)
            .bind(before)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        // Only the current branch grows, so a branch's steps are consecutive seqs: each
        // run of one branch is its newest steps up to the run's first.
        for run in seqs.chunk_by(|a, b| a.1 == b.1) {
            let (upto, branch) = run[0];
            page.extend(self.segment(thread_id, branch, upto, run.len()).await?);
        }
        Ok(page)
    }

    async fn checkpoint_at(
        &self,
        thread_id: &str,
        seq: u64,
    ) -> Result<Option<Checkpoint>, StoreError> {
        check::text("thread_id", thread_id)?;
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        let Some((branch, _)) = self.step_at(thread_id, seq).await? else {
            return Ok(None);
        };
        Ok(self
            .segment(thread_id, branch, seq, 1)
            .await?
            .into_iter()
            .find(|cp| i64::try_from(cp.seq) == Ok(seq)))
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<u64, StoreError> {
        check::text("thread_id", thread_id)?;
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let mut steps = 0;
        for q in DELETE_THREAD {
            // The last statement deletes the steps: its count is the answer.
            let done = sqlx::query(q)
                .bind(thread_id)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            steps = DB::rows_affected(&done);
        }
        tx.commit().await.map_err(backend)?;
        Ok(steps)
    }

    async fn copy_thread(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        check::text("thread_id", from)?;
        check::text("thread_id", to)?;
        let taken = || {
            StoreError::Invalid(format!(
                "thread {to:?} already has checkpoints; a copy needs a thread without any"
            ))
        };
        if self.head_seq(to).await?.is_some() {
            return Err(taken());
        }
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let mut steps = 0;
        for q in COPY_THREAD {
            // The last statement copies the steps: its count is the answer.
            let done = sqlx::query(q)
                .bind(from)
                .bind(to)
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        taken()
                    } else {
                        backend(e)
                    }
                })?;
            steps = DB::rows_affected(&done);
        }
        tx.commit().await.map_err(backend)?;
        Ok(steps)
    }
}
