// What `import Strata` brings: contexts and units of work (StrataContexts), records
// (StrataRecords), and the types of the layers beneath that appear in their API,
// re-exported by name so that `import Strata` is the only import an application needs.
// Nothing else of those modules is visible to an application: their other public
// declarations exist for the modules above them in this package, not as API.

@_exported import StrataContexts
@_exported import StrataRecords

// Options, reports and errors of the storage engine. The engine itself (its commit path,
// snapshots, batches) is not shown: applications change data through contexts, and ask
// the store for what they need of the storage (Store+Maintenance.swift).
@_exported import struct StrataEngine.EngineOptions
@_exported import enum StrataEngine.LeafCompression
@_exported import enum StrataEngine.EngineError
@_exported import enum StrataEngine.AccessMode
@_exported import enum StrataEngine.Limits
@_exported import struct StrataEngine.RecoveryReport
@_exported import struct StrataEngine.StoreStatus
@_exported import struct StrataEngine.ReaderStatus
@_exported import struct StrataEngine.VerifyReport
@_exported import struct StrataEngine.CopyReport

// The log's options, its statistics and its errors.
@_exported import enum StrataWAL.Durability
@_exported import enum StrataWAL.RecoveryMode
@_exported import struct StrataWAL.WALOptions
@_exported import struct StrataWAL.HistoryRetention
@_exported import enum StrataWAL.WALError
@_exported import struct StrataWAL.WALRecoveryReport
@_exported import struct StrataWAL.WALDamage
@_exported import struct StrataWAL.WALBatchAfterDamage
@_exported import struct StrataWAL.WALStatistics
@_exported import struct StrataWAL.LSN

// The file-system seam: `Store.open(path:fileSystem:)` takes any `FileSystem`; I/O errors
// name their operation and path.
@_exported import protocol StrataFileIO.FileSystem
@_exported import protocol StrataFileIO.OpenFile
@_exported import protocol StrataFileIO.FileLock
@_exported import class StrataFileIO.FileMapping
@_exported import struct StrataFileIO.FileOpenOptions
@_exported import struct StrataFileIO.POSIXFileSystem
@_exported import enum StrataFileIO.FileIOError
@_exported import enum StrataFileIO.FileOperation

// Foundation, as SwiftData brings it: records are `Codable` values that hold `Date`, `UUID`
// and `Data`, and repositories are queried with `#Predicate` and `SortDescriptor`.
@_exported import Foundation
