// The engines under test, each behind one small protocol: a transaction of puts and
// deletes, point reads, and a full ordered scan. Settings follow Benchmarks/README.md.
//  - strata / strata-relaxed: Strata's storage engine, durability .full / .relaxed; its
//    contexts (child contexts committed or discarded) for `nested`. strata-lz4: strata with
//    its leaves LZ4-compressed (`EngineOptions.leafCompression`); strata-small: strata with
//    `EngineOptions.smallFootprint`.
//  - sqlite: one table (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID, journal_mode=WAL,
//    synchronous=FULL, prepared statements, BEGIN/COMMIT per transaction; SAVEPOINT,
//    RELEASE and ROLLBACK TO for `nested`.
//  - lmdb: default (durable) flags, one write transaction per batch; nested (child)
//    transactions for `nested`.
//  - fdatasync: the disk's limit: 16 + V bytes appended and fdatasync'd per transaction.
import CLMDB
import CSQLite
import Strata
// The engine beneath the store: key/value workloads commit plain batches and read through
// snapshots, as the peers' benchmarks use their engines' own APIs.
@_spi(StorageEngine) import StrataTesting
import Foundation
import Synchronization

protocol BenchEngine: AnyObject, Sendable {
    /// Commits one transaction: a put per (key, value), a delete where the value is nil.
    func write(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws
    /// Starts and ends a phase of reads (one snapshot or read transaction for the phase).
    func beginReads() throws
    func endReads()
    /// Whether `key` has a value.
    func read(_ key: Int) throws -> Bool
    /// Keys seen by one full ordered scan.
    func scanCount() throws -> Int
    /// fdatasyncs issued, when the engine can tell.
    var fdatasyncs: Int? { get }
    /// One root transaction of the `nested` workload: a child that writes `kept` and is
    /// committed into the root, a second child that writes `discarded` and is thrown
    /// away, then the root's durable commit.
    func nested(kept: ArraySlice<Int>, discarded: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws
    func close() throws
    /// A reader for `readwhilewriting`, for one thread: each read sees the newest
    /// committed state (no snapshot held across reads).
    func makeReader() throws -> any BenchReader
}

/// One reading thread's handle (see `BenchEngine.makeReader`).
protocol BenchReader: AnyObject {
    func read(_ key: Int) throws -> Bool
    /// An ordered scan of at most `count` keys from `key` on (a short range scan, YCSB's
    /// workload E): the keys seen and the bytes of their values, each value reached.
    func scan(from key: Int, count: Int) throws -> (keys: Int, bytes: Int)
    /// Brings a reader in another process up to the writer's newest durable version
    /// (Strata's read-only store replays the log written since it last read).
    func catchUp() throws
    func close()
}

extension BenchReader {
    func catchUp() throws {}
}

/// Runs `sql` on `db`; throws SQLite's message when it fails.
func sqliteExec(_ db: OpaquePointer?, _ sql: String) throws {
    guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
        throw BenchError(description: "sqlite: \(sql): \(String(cString: sqlite3_errmsg(db)))")
    }
}

/// `sql` prepared on `db`.
func sqlitePrepare(_ db: OpaquePointer?, _ sql: String) throws -> OpaquePointer? {
    var statement: OpaquePointer?
    guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else {
        throw BenchError(description: "sqlite: prepare \(sql): \(String(cString: sqlite3_errmsg(db)))")
    }
    return statement
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
}

/// Strata: the storage engine for plain batches, the contexts above it for `nested`.
final class StrataEngineBench: BenchEngine {
    let store: Store
    var engine: StorageEngine { store.storageEngine }
    private let readSnapshot = Mutex<Snapshot?>(nil)

    init(directory: String, engine: String = "strata", durability: Durability, checkpoints: Bool = true,
         leafCompression: LeafCompression = .none) throws {
        var options = Workload.strataOptions(engine: engine, durability: durability)
        options.leafCompression = leafCompression
        if !checkpoints {
            options.checkpointMemtableBytes = .max
            options.checkpointLogBytes = .max
        }
        store = try Store.open(path: directory, options: options)
    }

    func nested(kept: ArraySlice<Int>, discarded: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        let root = store.makeContext()
        let child = try root.makeChild()
        for key in kept { try child.put(Workload.key(key), values(key)!) }
        try child.commit()
        let draft = try root.makeChild()
        for key in discarded { try draft.put(Workload.key(key), values(key)!) }
        draft.discard()
        try root.commit()
    }

    func write(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        var batch = WALBatch()
        for key in keys {
            if let value = values(key) { batch.put(Workload.key(key), value) } else { batch.delete(Workload.key(key)) }
        }
        try engine.commit(batch)
    }

    func beginReads() throws { readSnapshot.withLock { $0 = engine.snapshot() } }
    func endReads() { readSnapshot.withLock { $0 = nil } }

    /// Borrows the value where it lies and reads its length (`withValue`), as LMDB's
    /// `mdb_get` hands out a pointer and a size, instead of copying it into a new array.
    func read(_ key: Int) throws -> Bool {
        let snapshot = readSnapshot.withLock { $0 } ?? engine.snapshot()
        return try snapshot.withValue(forKey: Workload.key(key)) { $0.withUnsafeBytes { Workload.touch($0) } } != nil
    }

    /// Steps through the pairs where they lie (`Snapshot.forEach`), as the peers' cursors
    /// and iterators hand out pointers into their pages, without collecting them.
    func scanCount() throws -> Int {
        var count = 0
        try engine.snapshot().forEach { _, _ in
            count += 1
            return true
        }
        return count
    }

    var fdatasyncs: Int? { engine.logStatistics.syncCount }

    func close() throws { try engine.close() }

    func makeReader() throws -> any BenchReader { StrataReader(engine: engine) }
}

/// A Strata reader: the newest version per read (`StorageEngine.withValue`, no snapshot
/// object, as LMDB's reader renews one read transaction per read), its value borrowed.
final class StrataReader: BenchReader {
    let engine: StorageEngine

    init(engine: StorageEngine) { self.engine = engine }

    func read(_ key: Int) throws -> Bool {
        try engine.withValue(forKey: Workload.key(key)) { $0.byteCount } != nil
    }

    func catchUp() throws { try engine.refresh() }

    func scan(from key: Int, count: Int) throws -> (keys: Int, bytes: Int) {
        var seen = 0
        var bytes = 0
        try engine.snapshot().forEach(KeyRange(from: Workload.key(key))) { _, value in
            bytes &+= value.byteCount
            seen += 1
            return seen < count
        }
        return (seen, bytes)
    }

    func close() {}
}

/// SQLite through its C API. One connection, serialized by a lock (SQLite serializes
/// writers anyway and has no group commit).
final class SQLiteBench: BenchEngine, @unchecked Sendable {
    // @unchecked: every use of the connection and statements holds `lock`.
    /// How long a statement waits for a lock another connection holds.
    static let busyTimeoutMilliseconds: Int32 = 10_000
    private let lock = NSLock()
    private var db: OpaquePointer?
    private var put: OpaquePointer?
    private var delete: OpaquePointer?
    private var get: OpaquePointer?
    private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    let path: String

    init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/sqlite.db"
        guard sqlite3_open(directory + "/sqlite.db", &db) == SQLITE_OK else { throw BenchError(description: "sqlite3_open failed") }
        // Wait for locks, as an application would (GRDB does): a reader process opening or
        // closing the database takes the WAL index's lock for a moment, and a write meeting
        // it failed readwhilewriting with SQLITE_BUSY.
        sqlite3_busy_timeout(db, Self.busyTimeoutMilliseconds)
        try exec("PRAGMA journal_mode=WAL")
        try exec("PRAGMA synchronous=FULL")
        try exec("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        put = try prepare("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)")
        delete = try prepare("DELETE FROM kv WHERE k = ?")
        get = try prepare("SELECT v FROM kv WHERE k = ?")
    }

    private func exec(_ sql: String) throws { try sqliteExec(db, sql) }

    private func prepare(_ sql: String) throws -> OpaquePointer? { try sqlitePrepare(db, sql) }

    func write(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        lock.lock()
        defer { lock.unlock() }
        try exec("BEGIN")
        for key in keys {
            let value = values(key)
            try bindAndStep(value == nil ? delete : put, key, value)
        }
        try exec("COMMIT")
    }

    func nested(kept: ArraySlice<Int>, discarded: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        lock.lock()
        defer { lock.unlock() }
        try exec("BEGIN")
        try exec("SAVEPOINT kept")
        for key in kept { try bindAndStep(put, key, values(key)) }
        try exec("RELEASE kept")
        try exec("SAVEPOINT draft")
        for key in discarded { try bindAndStep(put, key, values(key)) }
        try exec("ROLLBACK TO draft")
        try exec("RELEASE draft")
        try exec("COMMIT")
    }

    private func bindAndStep(_ statement: OpaquePointer?, _ key: Int, _ value: [UInt8]?) throws {
        let k = Workload.key(key)
        sqlite3_reset(statement)
        k.withUnsafeBytes { _ = sqlite3_bind_blob(statement, 1, $0.baseAddress, Int32(k.count), transient) }
        if let value {
            value.withUnsafeBytes { _ = sqlite3_bind_blob(statement, 2, $0.baseAddress, Int32(value.count), transient) }
        }
        let status = sqlite3_step(statement)
        guard status == SQLITE_DONE else {
            throw BenchError(description: "sqlite: write failed: \(String(cString: sqlite3_errstr(status)))")
        }
    }

    func beginReads() throws {}
    func endReads() {}

    func read(_ key: Int) throws -> Bool {
        lock.lock()
        defer { lock.unlock() }
        let k = Workload.key(key)
        sqlite3_reset(get)
        k.withUnsafeBytes { _ = sqlite3_bind_blob(get, 1, $0.baseAddress, Int32(k.count), transient) }
        guard sqlite3_step(get) == SQLITE_ROW else { return false }
        _ = Workload.touch(UnsafeRawBufferPointer(start: sqlite3_column_blob(get, 0), count: Int(sqlite3_column_bytes(get, 0))))
        return true
    }

    func scanCount() throws -> Int {
        lock.lock()
        defer { lock.unlock() }
        let scan = try prepare("SELECT k, v FROM kv ORDER BY k")
        defer { sqlite3_finalize(scan) }
        var count = 0
        while sqlite3_step(scan) == SQLITE_ROW {
            _ = sqlite3_column_blob(scan, 1)
            count += 1
        }
        return count
    }

    var fdatasyncs: Int? { nil }

    func close() throws {
        for statement in [put, delete, get] { sqlite3_finalize(statement) }
        sqlite3_close(db)
    }

    func makeReader() throws -> any BenchReader { try SQLiteReader(path: path) }
}

/// A SQLite reader: a read-only connection of its own (WAL mode lets it read beside the
/// writer), one autocommit SELECT per read.
final class SQLiteReader: BenchReader {
    private var db: OpaquePointer?
    private var get: OpaquePointer?
    private var range: OpaquePointer?
    private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(path: String) throws {
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
            throw BenchError(description: "sqlite3_open_v2(readonly) failed")
        }
        sqlite3_busy_timeout(db, SQLiteBench.busyTimeoutMilliseconds)
        get = try sqlitePrepare(db, "SELECT v FROM kv WHERE k = ?")
        range = try sqlitePrepare(db, "SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?")
    }

    func scan(from key: Int, count: Int) throws -> (keys: Int, bytes: Int) {
        let k = Workload.key(key)
        sqlite3_reset(range)
        k.withUnsafeBytes { _ = sqlite3_bind_blob(range, 1, $0.baseAddress, Int32(k.count), transient) }
        sqlite3_bind_int64(range, 2, Int64(count))
        var (seen, bytes) = (0, 0)
        var step = sqlite3_step(range)
        while step == SQLITE_ROW {
            bytes += Int(sqlite3_column_bytes(range, 1))
            seen += 1
            step = sqlite3_step(range)
        }
        guard step == SQLITE_DONE else { throw BenchError(description: "sqlite: scan failed (\(step))") }
        return (seen, bytes)
    }

    func read(_ key: Int) throws -> Bool {
        let k = Workload.key(key)
        sqlite3_reset(get)
        k.withUnsafeBytes { _ = sqlite3_bind_blob(get, 1, $0.baseAddress, Int32(k.count), transient) }
        let step = sqlite3_step(get)
        guard step == SQLITE_ROW || step == SQLITE_DONE else { throw BenchError(description: "sqlite: read failed (\(step))") }
        if step == SQLITE_ROW { _ = sqlite3_column_bytes(get, 0) }
        return step == SQLITE_ROW
    }

    func close() {
        sqlite3_finalize(get)
        sqlite3_finalize(range)
        sqlite3_close(db)
    }
}

/// LMDB through its C API, default (durable) flags.
final class LMDBBench: BenchEngine, @unchecked Sendable {
    // @unchecked: LMDB serializes write transactions itself; `reader` is touched only by
    // the single reading thread of a read phase.
    private var env: OpaquePointer?
    private var dbi: MDB_dbi = 0
    private var reader: OpaquePointer?

    init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try check(mdb_env_create(&env), "env_create")
        try check(mdb_env_set_mapsize(env, 16 << 30), "set_mapsize")
        try check(mdb_env_open(env, directory, 0, 0o644), "env_open")
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, 0, &txn), "txn_begin")
        try check(mdb_dbi_open(txn, nil, 0, &dbi), "dbi_open")
        try check(mdb_txn_commit(txn), "txn_commit")
    }

    private func check(_ code: Int32, _ what: String) throws {
        guard code == 0 else { throw BenchError(description: "lmdb \(what): \(String(cString: mdb_strerror(code)))") }
    }

    func write(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, 0, &txn), "txn_begin")
        try apply(keys, values: values, in: txn)
        try check(mdb_txn_commit(txn), "txn_commit")
    }

    func nested(kept: ArraySlice<Int>, discarded: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        var root: OpaquePointer?
        try check(mdb_txn_begin(env, nil, 0, &root), "txn_begin")
        var child: OpaquePointer?
        try check(mdb_txn_begin(env, root, 0, &child), "txn_begin(nested)")
        try apply(kept, values: values, in: child)
        try check(mdb_txn_commit(child), "txn_commit(nested)")
        var draft: OpaquePointer?
        try check(mdb_txn_begin(env, root, 0, &draft), "txn_begin(nested)")
        try apply(discarded, values: values, in: draft)
        mdb_txn_abort(draft)
        try check(mdb_txn_commit(root), "txn_commit")
    }

    /// Puts (or deletes) `keys` in `txn`; aborts it and throws on failure.
    private func apply(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?, in txn: OpaquePointer?) throws {
        for key in keys {
            var k = Workload.key(key)
            let value = values(key)
            let code: Int32 = k.withUnsafeMutableBytes { kb in
                var mk = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
                guard var v = value else { return mdb_del(txn, dbi, &mk, nil) }
                return v.withUnsafeMutableBytes { vb in
                    var mv = MDB_val(mv_size: vb.count, mv_data: vb.baseAddress)
                    return mdb_put(txn, dbi, &mk, &mv, 0)
                }
            }
            guard code == 0 || (value == nil && code == MDB_NOTFOUND) else {
                mdb_txn_abort(txn)
                try check(code, "put")
                return
            }
        }
    }

    func beginReads() throws { try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &reader), "txn_begin(rdonly)") }

    func endReads() {
        mdb_txn_abort(reader)
        reader = nil
    }

    func read(_ key: Int) throws -> Bool {
        var k = Workload.key(key)
        return k.withUnsafeMutableBytes { kb in
            var mk = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
            var mv = MDB_val()
            guard mdb_get(reader, dbi, &mk, &mv) == 0 else { return false }
            _ = Workload.touch(UnsafeRawBufferPointer(start: mv.mv_data, count: mv.mv_size))
            return true
        }
    }

    func scanCount() throws -> Int {
        try beginReads()
        defer { endReads() }
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(reader, dbi, &cursor), "cursor_open")
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        var count = 0
        var op = MDB_FIRST
        while mdb_cursor_get(cursor, &k, &v, op) == 0 {
            count += 1
            op = MDB_NEXT
        }
        return count
    }

    var fdatasyncs: Int? { nil }

    func close() throws { mdb_env_close(env) }

    func makeReader() throws -> any BenchReader {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "txn_begin(rdonly)")
        mdb_txn_reset(txn)
        return LMDBReader(txn: txn, dbi: dbi)
    }
}

/// An LMDB reader: one read transaction handle of its thread, renewed for each read (as
/// LMDB's docs advise for short reads) and reset after it.
final class LMDBReader: BenchReader {
    private let txn: OpaquePointer?
    private let dbi: MDB_dbi

    init(txn: OpaquePointer?, dbi: MDB_dbi) {
        self.txn = txn
        self.dbi = dbi
    }

    func read(_ key: Int) throws -> Bool {
        guard mdb_txn_renew(txn) == 0 else { throw BenchError(description: "lmdb txn_renew failed") }
        defer { mdb_txn_reset(txn) }
        var k = Workload.key(key)
        return k.withUnsafeMutableBytes { kb in
            var mk = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
            var mv = MDB_val()
            return mdb_get(txn, dbi, &mk, &mv) == 0
        }
    }

    func scan(from key: Int, count: Int) throws -> (keys: Int, bytes: Int) {
        guard mdb_txn_renew(txn) == 0 else { throw BenchError(description: "lmdb txn_renew failed") }
        defer { mdb_txn_reset(txn) }
        var cursor: OpaquePointer?
        guard mdb_cursor_open(txn, dbi, &cursor) == 0 else { throw BenchError(description: "lmdb cursor_open failed") }
        defer { mdb_cursor_close(cursor) }
        var k = Workload.key(key)
        return k.withUnsafeMutableBytes { kb in
            var mk = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
            var mv = MDB_val()
            var seen = 0
            var bytes = 0
            var op = MDB_SET_RANGE
            while seen < count, mdb_cursor_get(cursor, &mk, &mv, op) == 0 {
                bytes &+= mv.mv_size
                seen += 1
                op = MDB_NEXT
            }
            return (seen, bytes)
        }
    }

    func close() { mdb_txn_abort(txn) }
}

/// The disk's own limit: append and fdatasync, once per transaction.
final class FdatasyncBench: BenchEngine {
    let file: any OpenFile
    let offset = Mutex(0)
    let syncs = Mutex(0)
    let valueBytes: Int

    init(directory: String, capacityBytes: Int, valueBytes: Int) throws {
        self.valueBytes = valueBytes
        try POSIXFileSystem().createDirectory(directory)
        file = try POSIXFileSystem().open(directory + "/raw", options: [.create, .write, .truncate])
        try file.allocate(offset: 0, length: Int64(capacityBytes))
        try file.sync()
    }

    func write(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        var bytes: [UInt8] = []
        for key in keys { bytes += Workload.key(key) + (values(key) ?? []) }
        let at = offset.withLock { value in defer { value += bytes.count }; return value }
        try file.write(bytes, at: Int64(at))
        try file.syncData()
        syncs.withLock { $0 += 1 }
    }

    func beginReads() throws {}
    func endReads() {}
    func nested(kept: ArraySlice<Int>, discarded: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        throw BenchError(description: "fdatasync has no transactions to nest")
    }
    func read(_ key: Int) throws -> Bool { throw BenchError(description: "fdatasync measures writes only") }
    func makeReader() throws -> any BenchReader { throw BenchError(description: "fdatasync measures writes only") }
    func scanCount() throws -> Int { throw BenchError(description: "fdatasync measures writes only") }
    var fdatasyncs: Int? { syncs.withLock { $0 } }
    func close() throws { try file.close() }
}
