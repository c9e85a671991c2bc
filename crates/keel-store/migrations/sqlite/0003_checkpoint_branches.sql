-- Checkpoint branches (time travel). Expand-only: columns are added, nothing is dropped.
-- A thread's checkpoints form a tree: a run or a state update may start from any earlier
-- checkpoint, which starts a new branch whose first step's parent is that checkpoint.
-- Seqs stay unique per thread and increase with time; the head row names the current
-- branch (the newest), which is the only one ever written again.

-- The checkpoint a step follows (NULL for a thread's first), the branch it belongs to
-- (the seq of the branch's first step; 0 for the thread's first branch) and its depth
-- (how many checkpoints precede it on its branch).
ALTER TABLE checkpoint_steps ADD COLUMN parent_seq INTEGER;
ALTER TABLE checkpoint_steps ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE checkpoint_steps ADD COLUMN depth INTEGER;
-- Entries belong to one branch: a fork's first step holds the state it forked from, so
-- every later step of the branch costs what it changed and never touches another branch.
ALTER TABLE checkpoint_entries ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;
-- The branch the head is on.
ALTER TABLE checkpoint_heads ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;

-- Steps written before this migration are one straight line.
UPDATE checkpoint_steps
SET parent_seq = CASE WHEN seq > 0 THEN seq - 1 END, depth = seq
WHERE depth IS NULL;

CREATE INDEX IF NOT EXISTS checkpoint_steps_by_branch
    ON checkpoint_steps (thread_id, branch, seq);
CREATE INDEX IF NOT EXISTS checkpoint_entries_by_branch
    ON checkpoint_entries (thread_id, branch, added_seq);
