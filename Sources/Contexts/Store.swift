// The store: the one object an application keeps. It opens the engine (or an in-memory
// one), hands out root contexts, runs units of work (Store+Write.swift) and publishes
// committed changes to observers (ChangeFeed.swift).
//
// Thread-safety: `Sendable`; use one store from every thread and task. Contexts made
// from it belong to the task that made them.
import StrataEngine
import StrataFileIO
import Foundation

/// An open Strata store.
public final class Store: Sendable {
    /// The storage engine contexts read from: the store itself when it is embedded; for a
    /// store over etcd (StrataEtcd), the in-memory replica of its data that etcd's Watch
    /// keeps current. Not public: a commit through it would skip the contexts' conflict
    /// checks, the records' upkeep and, over etcd, the backend (docs/public-api.md). What
    /// applications need of it is `Store` API (Store+Maintenance.swift).
    package let engine: StorageEngine
    /// What opening found and repaired.
    public let recoveryReport: RecoveryReport
    /// Whether the store lives in memory only (`Store.inMemory`).
    public let isInMemory: Bool
    /// Where root commits go (StorageBackend.swift): `engine` itself when embedded.
    let backend: any StorageBackend
    let feed: ChangeFeedHub
    /// What the layers above contexts keep for this store (StoreLayers.swift).
    package let layers = StoreLayers()

    /// A store on `backend`. Embedded stores come from `open` and `inMemory`; other
    /// backends of this package (StrataEtcd) call this.
    package init(backend: any StorageBackend, report: RecoveryReport, isInMemory: Bool) {
        let engine = backend.localEngine
        self.backend = backend
        self.engine = engine
        self.recoveryReport = report
        self.isInMemory = isInMemory
        let feed = ChangeFeedHub()
        self.feed = feed
        engine.observeCommits { batches in feed.publish(batches) }
    }

    /// Opens the store in directory `path`: takes its lock, recovers from the log, and
    /// returns. `.readWrite` (the default) creates the store when it does not exist, and
    /// one process at a time may have it so; `.readOnly` changes no byte of the store but
    /// its reader table (a unit of work on it throws
    /// `UnitOfWorkError.commitFailed(.notWritten(EngineError.readOnly))`), and any number of
    /// read-only opens, in any process, may read it beside its writer: each new read moves
    /// to the newest version the writer made durable (`refresh()`). Throws `EngineError` (a
    /// second writer gets `.inUse` naming the holder; damage names its file and offset).
    public static func open(path: String, mode: AccessMode = .readWrite, options: EngineOptions = EngineOptions()) throws -> Store {
        try open(path: path, mode: mode, fileSystem: POSIXFileSystem(), options: options)
    }

    /// Opens the store in `path` on `fileSystem` (the crash harness passes a simulated one).
    public static func open(path: String, mode: AccessMode = .readWrite, fileSystem: any FileSystem,
                            options: EngineOptions = EngineOptions()) throws -> Store {
        try open(path: path, mode: mode, fileSystem: fileSystem, options: options, isInMemory: false)
    }

    private static func open(path: String, mode: AccessMode = .readWrite, fileSystem: any FileSystem, options: EngineOptions,
                             isInMemory: Bool) throws -> Store {
        let (engine, report) = try StorageEngine.open(path: path, mode: mode, fileSystem: fileSystem, options: options)
        return Store(backend: engine, report: report, isInMemory: isInMemory)
    }

    /// A store that lives in memory only (the same code on a simulated file system that
    /// never crashes): for tests and caches. Log segments are capped at
    /// `StorageEngine.inMemorySegmentBytes`, and the log's history at four of them.
    public static func inMemory(options: EngineOptions = EngineOptions()) throws -> Store {
        var options = options
        options.log.segmentBytes = min(options.log.segmentBytes, StorageEngine.inMemorySegmentBytes)
        // History lives in memory too: a few segments' worth.
        options.log.history.bytes = min(options.log.history.bytes, 4 * StorageEngine.inMemorySegmentBytes)
        return try open(path: "/strata", fileSystem: SimulatedFileSystem(), options: options, isInMemory: true)
    }

    /// The latest committed version.
    public var version: UInt64 { engine.version }

    /// Moves a read-only store to the newest version its writer (in this process or
    /// another) made durable. Each new read, context or unit of work already does so when
    /// the writer has committed since; contexts made before keep the version they read. A
    /// writable store has nothing to do. Throws `EngineError`.
    public func refresh() throws {
        try engine.refresh()
    }

    /// A root context reading the latest version. `mergePolicy` settles `refresh()`
    /// conflicts and is inherited by its children.
    public func makeContext(mergePolicy: MergePolicy = .error) -> Context {
        Context(store: self, snapshot: engine.snapshot(), mergePolicy: mergePolicy)
    }

    /// Runs `body` on a read-only context at the latest version: it never conflicts and
    /// never writes. Rethrows what `body` throws.
    public func read<T>(_ body: (Context) throws -> T) rethrows -> T {
        let context = makeReadOnlyContext()
        defer { context.discard() }
        return try body(context)
    }

    package func makeReadOnlyContext(recorder: ReadRecorder? = nil) -> Context {
        Context(store: self, snapshot: engine.snapshot(), mergePolicy: .error, isReadOnly: true, recorder: recorder)
    }

    /// Checkpoints, ends every change feed and closes the store. Later use throws
    /// `EngineError.closed`.
    public func close() throws {
        defer { feed.finishAll() }
        try backend.close()
    }
}
