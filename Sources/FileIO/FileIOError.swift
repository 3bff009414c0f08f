// The one error type of the FileIO module: a failed file operation, by kind, with the
// operation and the path. Both file-system implementations map errno values the same way
// (`FileIOError(errno:operation:path:)`), so injected faults look exactly like real ones.
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The file operations, as named in errors and counted by the simulated file system.
public enum FileOperation: String, Sendable, CaseIterable, Hashable {
    case open, read, write, append, size, syncData = "fdatasync", sync = "fsync", truncate = "ftruncate"
    case allocate = "fallocate", close, rename, remove = "unlink", createDirectory = "mkdir"
    case syncDirectory = "fsync(directory)", list = "readdir", lock = "flock"

    /// Whether the operation changes what a crash could leave behind.
    public var isMutating: Bool {
        switch self {
        case .write, .append, .syncData, .sync, .truncate, .allocate, .rename, .remove,
             .createDirectory, .syncDirectory:
            true
        case .open, .read, .size, .close, .list, .lock:
            false
        }
    }
}

/// A failed file operation. Each case names the operation and the path.
public enum FileIOError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound(operation: FileOperation, path: String)
    case alreadyExists(operation: FileOperation, path: String)
    case permissionDenied(operation: FileOperation, path: String)
    /// ENOSPC.
    case noSpace(operation: FileOperation, path: String)
    /// EDQUOT.
    case quotaExceeded(operation: FileOperation, path: String)
    /// EROFS.
    case readOnlyFileSystem(operation: FileOperation, path: String)
    /// EIO: the device reported an error; data may or may not have reached it.
    case ioError(operation: FileOperation, path: String)
    /// The file is locked by another holder (EWOULDBLOCK from flock).
    case locked(path: String)
    /// The handle was closed (or lost in a simulated crash) before this operation.
    case closed(operation: FileOperation, path: String)
    /// Any other errno.
    case other(operation: FileOperation, path: String, errno: Int32)

    /// Maps an errno value to its case.
    public init(errno code: Int32, operation: FileOperation, path: String) {
        switch code {
        case ENOENT: self = .notFound(operation: operation, path: path)
        case EEXIST: self = .alreadyExists(operation: operation, path: path)
        case EACCES, EPERM: self = .permissionDenied(operation: operation, path: path)
        case ENOSPC: self = .noSpace(operation: operation, path: path)
        case EDQUOT: self = .quotaExceeded(operation: operation, path: path)
        case EROFS: self = .readOnlyFileSystem(operation: operation, path: path)
        case EIO: self = .ioError(operation: operation, path: path)
        case EWOULDBLOCK where operation == .lock: self = .locked(path: path)
        case EBADF: self = .closed(operation: operation, path: path)
        default: self = .other(operation: operation, path: path, errno: code)
        }
    }

    /// The operation that failed.
    public var operation: FileOperation {
        switch self {
        case let .notFound(operation, _), let .alreadyExists(operation, _), let .permissionDenied(operation, _),
             let .noSpace(operation, _), let .quotaExceeded(operation, _), let .readOnlyFileSystem(operation, _),
             let .ioError(operation, _), let .closed(operation, _), let .other(operation, _, _):
            operation
        case .locked:
            .lock
        }
    }

    /// The path of the file or directory.
    public var path: String {
        switch self {
        case let .notFound(_, path), let .alreadyExists(_, path), let .permissionDenied(_, path),
             let .noSpace(_, path), let .quotaExceeded(_, path), let .readOnlyFileSystem(_, path),
             let .ioError(_, path), let .locked(path), let .closed(_, path), let .other(_, path, _):
            path
        }
    }

    public var description: String {
        let op = operation.rawValue
        switch self {
        case .notFound(_, let path): return "\(op) failed: no such file or directory: \(path)."
        case .alreadyExists(_, let path): return "\(op) failed: \(path) already exists."
        case .permissionDenied(_, let path): return "\(op) failed: permission denied for \(path)."
        case .noSpace(_, let path): return "\(op) failed on \(path): the device is full; free space and retry."
        case .quotaExceeded(_, let path): return "\(op) failed on \(path): the disk quota is exhausted."
        case .readOnlyFileSystem(_, let path): return "\(op) failed on \(path): the file system is read-only."
        case .ioError(_, let path): return "\(op) failed on \(path): the device reported an I/O error (EIO)."
        case .locked(let path):
            return "\(path) is locked by another process or another open store; close it first."
        case .closed(_, let path): return "\(op) on \(path) used a file handle that is already closed."
        case let .other(_, path, code): return "\(op) failed on \(path) with errno \(code)."
        }
    }
}

// Read as a sentence through Foundation's `LocalizedError` too (`localizedDescription`,
// SwiftUI alerts, logs): the same text as `description`.
extension FileIOError: LocalizedError {
    public var errorDescription: String? { description }
}
