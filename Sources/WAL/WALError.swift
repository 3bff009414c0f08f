// The one error type of the WAL module. Every case says where (file, offset, LSN) and what,
// and its description reads as a sentence with a remedy where there is one.
import Foundation
import StrataFileIO

/// Errors of the write-ahead log.
public enum WALError: Error, Sendable, CustomStringConvertible {
    // MARK: Appending

    /// A batch's encoding is over the limit the log accepts.
    case batchTooLarge(byteCount: Int, limit: Int)
    /// The write or fdatasync that carried the batch at `lsn` failed: the batch may or may
    /// not be on disk (outcome unknown) and the log accepts no more appends until reopened.
    case commitOutcomeUnknown(lsn: LSN, cause: FileIOError)
    /// The batch at `lsn` was not written because the log failed first (outcome known: it is
    /// not in the log), or the log had already failed when `append` was called.
    case logFailed(cause: FileIOError)
    /// The log was closed.
    case closed
    /// `waitUntilDone` was asked about an LSN that `submit` never returned.
    case notSubmitted(LSN)
    /// A setting of `WALOptions` is out of range; the text names it.
    case invalidOptions(String)

    // MARK: Reading and recovery

    /// A segment header does not verify.
    case corruptSegmentHeader(path: String, reason: String)
    /// A segment was written by a newer format version.
    case unsupportedVersion(path: String, found: UInt16, supported: UInt16)
    /// A frame that later frames vouch for (so it was once durable) does not verify: the log
    /// is damaged in the middle, not torn at its tail.
    case corruptFrame(path: String, offset: Int64, lsn: LSN, reason: String)
    /// A frame verifies but its batch does not decode, or its fragments do not fit together.
    case corruptBatch(path: String, offset: Int64, lsn: LSN, reason: String)
    /// Segment files are not consecutive, or their LSNs leave a hole.
    case missingData(path: String, reason: String)
    /// A segment file is larger than any the log writes.
    case segmentTooLarge(path: String, byteCount: Int64, limit: Int64)
    /// The file system failed while the log was opened or read.
    case io(FileIOError)

    public var description: String {
        switch self {
        case let .batchTooLarge(byteCount, limit):
            "A batch of \(byteCount) encoded bytes is over the log's limit of \(limit) bytes; split it into smaller commits."
        case let .commitOutcomeUnknown(lsn, cause):
            "The commit at \(lsn) may or may not be durable: \(cause) The log refuses further appends; reopen it to recover."
        case let .logFailed(cause):
            "The log stopped after an earlier I/O failure (\(cause)); nothing more was written. Reopen it to recover."
        case .closed:
            "The log is closed; open it again to append."
        case let .notSubmitted(lsn):
            "No batch was submitted as \(lsn); wait only for LSNs that submit returned."
        case let .invalidOptions(reason):
            "Invalid WAL options: \(reason)."
        case let .corruptSegmentHeader(path, reason):
            "The segment header of \(path) is corrupt: \(reason)."
        case let .unsupportedVersion(path, found, supported):
            "\(path) was written by WAL format version \(found); this build reads up to version \(supported). Use a newer Strata."
        case let .corruptFrame(path, offset, lsn, reason):
            "The frame of \(lsn) at offset \(offset) of \(path) is corrupt (\(reason)), and later frames show it was once durable. "
                + "`strata salvage` (or opening with a salvage RecoveryMode) recovers what the log still holds."
        case let .corruptBatch(path, offset, lsn, reason):
            "The batch of \(lsn) at offset \(offset) of \(path) is corrupt: \(reason)."
        case let .missingData(path, reason):
            "The log is missing data at \(path): \(reason)."
        case let .segmentTooLarge(path, byteCount, limit):
            "\(path) is \(byteCount) bytes, larger than the largest segment of \(limit) bytes; it is not a Strata log segment."
        case let .io(cause):
            "\(cause)"
        }
    }
}

// Read as a sentence through Foundation's `LocalizedError` too (`localizedDescription`,
// SwiftUI alerts, logs): the same text as `description`.
extension WALError: LocalizedError {
    public var errorDescription: String? { description }
}
