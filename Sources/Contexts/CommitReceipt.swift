// What a commit reports.

/// What a context's commit did. For a child (a merge into its parent) the byte counts,
/// group size and latency are zero and `version` is the snapshot's.
public struct CommitReceipt: Sendable, Equatable {
    /// The store version that holds the changes (for a root: the new version).
    public let version: UInt64
    /// Keys written (puts and deletes).
    public let changeCount: Int
    /// Bytes of the encoded batch in the log.
    public let rawByteCount: Int
    /// Bytes of it as stored (after LZ4 where it helped).
    public let storedByteCount: Int
    /// How many commits shared this one's log write and fdatasync.
    public let groupSize: Int
    /// From the call of `commit()` to its return.
    public let latency: Duration
}
