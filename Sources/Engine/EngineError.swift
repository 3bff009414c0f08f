// The one error type of the Engine module. Every case says where and what; its
// description reads as a sentence with a remedy where there is one.
import Foundation
import StrataFileIO
import StrataWAL

/// Errors of the storage engine.
public enum EngineError: Error, Sendable, CustomStringConvertible {
    /// A key is longer than `Limits.maxKeyBytes` (or empty).
    case keyTooLarge(byteCount: Int, limit: Int)
    /// A value is longer than `Limits.maxValueBytes`.
    case valueTooLarge(byteCount: Int, limit: Int)
    /// Another commit wrote these keys after the version this commit read at; the first
    /// committer won. Retry the work on a fresh snapshot.
    case conflict(keys: [[UInt8]], readVersion: UInt64)
    /// A page does not verify: its checksum, type, ID or layout is wrong.
    case corruptPage(path: String, offset: Int64, reason: String)
    /// Neither meta page verifies.
    case noValidMetaPage(path: String, reasons: [String])
    /// The data file was written by a newer format version.
    case unsupportedVersion(path: String, found: UInt16, supported: UInt16)
    /// The store failed earlier (an I/O error where memory and disk may disagree) and
    /// accepts no more writes until it is reopened.
    case storeFailed(reason: String)
    /// A file the store needs is missing, or its files do not continue each other (a data
    /// file removed or replaced by an older copy): opening would lose acknowledged commits.
    case missingData(path: String, reason: String)
    /// The store is closed.
    case closed
    /// A write, checkpoint or other change was asked of a store opened `.readOnly`.
    case readOnly(path: String)
    /// Another opener holds the store in a way this open cannot share: `holder` says who
    /// (a writer's process ID, or read-only openers) and what to do.
    case inUse(path: String, holder: String)
    /// A read-only open found no store at `path` (a read-only open creates nothing).
    case notAStore(path: String)
    /// Every slot of the store's reader table (`path`) is held by an open reader.
    case tooManyReaders(path: String, limit: Int)
    /// The directory holds a copy (`backup` or `compact`) that did not finish: its
    /// `INCOMPLETE` marker is still there.
    case incompleteCopy(path: String)
    /// The write-ahead log no longer holds the batch of version `requested`: a checkpoint
    /// released it. The oldest version it may hold is `oldest`.
    case historyUnavailable(requested: UInt64, oldest: UInt64)
    /// Invalid options; the text names the setting.
    case invalidOptions(String)
    /// `operation` copies a store's files on disk, and the store at `location` has none (a
    /// store over etcd, or one in memory): copy it with that system's own tools.
    case notEmbedded(operation: String, location: String)
    /// The write-ahead log failed or is damaged.
    case log(WALError)
    /// The file system failed.
    case io(FileIOError)

    public var description: String {
        switch self {
        case let .keyTooLarge(byteCount, limit):
            "A key of \(byteCount) bytes is outside the limit of 1 to \(limit) bytes; use a shorter key."
        case let .valueTooLarge(byteCount, limit):
            "A value of \(byteCount) bytes is over the limit of \(limit) bytes; split it across keys."
        case let .conflict(keys, readVersion):
            "Another commit changed \(keys.count) key(s) after version \(readVersion) that this commit also writes "
                + "(first: \(keys.first.map(renderKey) ?? "")); retry on a fresh snapshot."
        case let .corruptPage(path, offset, reason):
            "The page at offset \(offset) of \(path) is corrupt: \(reason)."
        case let .noValidMetaPage(path, reasons):
            "Neither meta page of \(path) is valid (\(reasons.joined(separator: "; "))); it is not a usable Strata data file."
        case let .unsupportedVersion(path, found, supported):
            "\(path) was written by data format version \(found); this build reads up to version \(supported). Use a newer Strata."
        case let .storeFailed(reason):
            "The store stopped accepting writes after an I/O failure (\(reason)); reopen it to recover."
        case let .missingData(path, reason):
            "The store at \(path) is missing data: \(reason). Opening it would lose acknowledged commits; "
                + "restore the store's files (data and wal/ together) from a backup."
        case .closed:
            "The store is closed; open it again."
        case let .readOnly(path):
            "The store at \(path) was opened read-only; open it with mode .readWrite to change it."
        case let .inUse(path, holder):
            "The store at \(path) is in use: \(holder)."
        case let .notAStore(path):
            "There is no store at \(path) (no data file); a read-only open creates nothing, open it for writing to create one."
        case let .tooManyReaders(path, limit):
            "\(limit) read-only openers already have the store open (the reader table \(path) has no free slot); "
                + "close some, or share one read-only store between the readers of a process."
        case let .incompleteCopy(path):
            "\(path) holds a copy of a store that did not finish (a backup or compact was stopped before its end; the file "
                + "INCOMPLETE marks it), so keys may be missing from it. It is not opened: remove the directory and copy again."
        case let .historyUnavailable(requested, oldest):
            "Neither the log nor its history holds version \(requested) any more (the oldest kept is \(oldest)); "
                + "start from a later version, or keep more history (WALOptions.history)."
        case let .invalidOptions(reason):
            "Invalid store options: \(reason)."
        case let .notEmbedded(operation, location):
            "\(operation) copies a store's files on disk; the store (\(location)) has none. "
                + "Copy a store over etcd with etcd's own snapshot (etcdctl snapshot save); an in-memory store cannot be copied to disk."
        case let .log(error):
            "\(error)"
        case let .io(error):
            "\(error)"
        }
    }
}

/// A key for messages: UTF-8 text in quotes when it is valid UTF-8 without control
/// characters (any script), `0x`-prefixed hex otherwise.
package func renderKey(_ key: [UInt8]) -> String {
    if let text = String(validating: key, as: UTF8.self),
       !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
        return "\"\(text)\""
    }
    let digits = Array("0123456789abcdef".utf8)
    var hex = [UInt8]("0x".utf8)
    hex.reserveCapacity(2 + key.count * 2)
    for byte in key {
        hex.append(digits[Int(byte >> 4)])
        hex.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: hex, as: UTF8.self)
}

// Read as a sentence through Foundation's `LocalizedError` too (`localizedDescription`,
// SwiftUI alerts, logs): the same text as `description`.
extension EngineError: LocalizedError {
    public var errorDescription: String? { description }
}
