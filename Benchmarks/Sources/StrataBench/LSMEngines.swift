// LevelDB and RocksDB through their C APIs, set up as a user would: default options
// (create_if_missing), every write batch synced (`sync = true`: durable like Strata's
// `.full`), reads through one snapshot per read phase, scans with an iterator. Both C APIs
// have the same shape, so one class drives either through a table of its functions.
import CLevelDB
import CRocksDB
import Foundation

/// The functions of one LSM engine's C API that the benchmark uses. Every handle is an
/// opaque C pointer; `error` is the C API's `char** errptr`.
struct LSMFunctions: Sendable {
    typealias Handle = OpaquePointer
    typealias Error = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>

    let name: String
    let makeOptions: @Sendable () -> Handle?
    let open: @Sendable (Handle?, String, Error) -> Handle?
    let close: @Sendable (Handle?) -> Void
    let makeWriteOptions: @Sendable () -> Handle?
    let makeReadOptions: @Sendable () -> Handle?
    let makeBatch: @Sendable () -> Handle?
    let destroyBatch: @Sendable (Handle?) -> Void
    let put: @Sendable (Handle?, UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void
    let delete: @Sendable (Handle?, UnsafeRawBufferPointer) -> Void
    let write: @Sendable (Handle?, Handle?, Handle?, Error) -> Void
    /// Whether the key has a value (the value is fetched, passed to `Workload.touch` when
    /// the last argument says so, and freed).
    let get: @Sendable (Handle?, Handle?, UnsafeRawBufferPointer, Error, Bool) -> Bool
    let snapshot: @Sendable (Handle?) -> Handle?
    let releaseSnapshot: @Sendable (Handle?, Handle?) -> Void
    let setSnapshot: @Sendable (Handle?, Handle?) -> Void
    let iterator: @Sendable (Handle?, Handle?) -> Handle?
    let destroyIterator: @Sendable (Handle?) -> Void
    let seekToFirst: @Sendable (Handle?) -> Void
    let seek: @Sendable (Handle?, UnsafeRawBufferPointer) -> Void
    /// The length of the iterator's current value (its bytes reached).
    let valueLength: @Sendable (Handle?) -> Int
    let isValid: @Sendable (Handle?) -> Bool
    let next: @Sendable (Handle?) -> Void
    let free: @Sendable (UnsafeMutableRawPointer?) -> Void

    static let leveldb = LSMFunctions(
        name: "leveldb",
        makeOptions: {
            let options = leveldb_options_create()
            leveldb_options_set_create_if_missing(options, 1)
            return options
        },
        open: { options, path, error in leveldb_open(options, path, error) },
        close: { leveldb_close($0) },
        makeWriteOptions: {
            let options = leveldb_writeoptions_create()
            leveldb_writeoptions_set_sync(options, 1)
            return options
        },
        makeReadOptions: { leveldb_readoptions_create() },
        makeBatch: { leveldb_writebatch_create() },
        destroyBatch: { leveldb_writebatch_destroy($0) },
        put: { batch, key, value in
            leveldb_writebatch_put(batch, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count,
                                   value.baseAddress?.assumingMemoryBound(to: CChar.self), value.count)
        },
        delete: { batch, key in leveldb_writebatch_delete(batch, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count) },
        write: { db, options, batch, error in leveldb_write(db, options, batch, error) },
        get: { db, options, key, error, touch in
            var length = 0
            let value = leveldb_get(db, options, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count, &length, error)
            if touch, value != nil { _ = Workload.touch(UnsafeRawBufferPointer(start: value, count: length)) }
            leveldb_free(value)
            return value != nil
        },
        snapshot: { leveldb_create_snapshot($0) },
        releaseSnapshot: { leveldb_release_snapshot($0, $1) },
        setSnapshot: { leveldb_readoptions_set_snapshot($0, $1) },
        iterator: { leveldb_create_iterator($0, $1) },
        destroyIterator: { leveldb_iter_destroy($0) },
        seekToFirst: { leveldb_iter_seek_to_first($0) },
        seek: { iterator, key in leveldb_iter_seek(iterator, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count) },
        valueLength: { iterator in
            var length = 0
            _ = leveldb_iter_value(iterator, &length)
            return length
        },
        isValid: { leveldb_iter_valid($0) != 0 },
        next: { leveldb_iter_next($0) },
        free: { leveldb_free($0) })

    static let rocksdb = LSMFunctions(
        name: "rocksdb",
        makeOptions: {
            let options = rocksdb_options_create()
            rocksdb_options_set_create_if_missing(options, 1)
            return options
        },
        open: { options, path, error in rocksdb_open(options, path, error) },
        close: { rocksdb_close($0) },
        makeWriteOptions: {
            let options = rocksdb_writeoptions_create()
            rocksdb_writeoptions_set_sync(options, 1)
            return options
        },
        makeReadOptions: { rocksdb_readoptions_create() },
        makeBatch: { rocksdb_writebatch_create() },
        destroyBatch: { rocksdb_writebatch_destroy($0) },
        put: { batch, key, value in
            rocksdb_writebatch_put(batch, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count,
                                   value.baseAddress?.assumingMemoryBound(to: CChar.self), value.count)
        },
        delete: { batch, key in rocksdb_writebatch_delete(batch, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count) },
        write: { db, options, batch, error in rocksdb_write(db, options, batch, error) },
        get: { db, options, key, error, touch in
            var length = 0
            let value = rocksdb_get(db, options, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count, &length, error)
            if touch, value != nil { _ = Workload.touch(UnsafeRawBufferPointer(start: value, count: length)) }
            rocksdb_free(value)
            return value != nil
        },
        snapshot: { rocksdb_create_snapshot($0) },
        releaseSnapshot: { rocksdb_release_snapshot($0, $1) },
        setSnapshot: { rocksdb_readoptions_set_snapshot($0, $1) },
        iterator: { rocksdb_create_iterator($0, $1) },
        destroyIterator: { rocksdb_iter_destroy($0) },
        seekToFirst: { rocksdb_iter_seek_to_first($0) },
        seek: { iterator, key in rocksdb_iter_seek(iterator, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count) },
        valueLength: { iterator in
            var length = 0
            _ = rocksdb_iter_value(iterator, &length)
            return length
        },
        isValid: { rocksdb_iter_valid($0) != 0 },
        next: { rocksdb_iter_next($0) },
        free: { rocksdb_free($0) })
}

/// LevelDB or RocksDB. Their write path serializes batches itself (and groups concurrent
/// synced writers into one log write).
final class LSMBench: BenchEngine, @unchecked Sendable {
    // @unchecked: the C handles are thread-safe per the engines' docs; `snapshot` and
    // `readOptions` changes happen only in begin/endReads, on the single reading thread.
    private let api: LSMFunctions
    private let options: OpaquePointer?
    private let db: OpaquePointer?
    private let writeOptions: OpaquePointer?
    private let readOptions: OpaquePointer?
    private var snapshot: OpaquePointer?

    init(_ api: LSMFunctions, directory: String) throws {
        self.api = api
        let options = api.makeOptions()
        self.options = options
        db = try Self.check(api, "open") { api.open(options, directory, $0) }
        writeOptions = api.makeWriteOptions()
        readOptions = api.makeReadOptions()
    }

    /// Runs `body` with a C error slot; throws the engine's message if it set one (freed
    /// with the engine's own `free`, as its API asks).
    private static func check<T>(_ api: LSMFunctions, _ what: String, _ body: (LSMFunctions.Error) -> T) throws -> T {
        var message: UnsafeMutablePointer<CChar>?
        let result = body(&message)
        if let message {
            defer { api.free(message) }
            throw BenchError(description: "\(api.name) \(what): \(String(cString: message))")
        }
        return result
    }

    func write(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        let batch = api.makeBatch()
        defer { api.destroyBatch(batch) }
        for key in keys {
            Workload.key(key).withUnsafeBytes { k in
                if let value = values(key) { value.withUnsafeBytes { api.put(batch, k, $0) } } else { api.delete(batch, k) }
            }
        }
        try Self.check(api, "write") { api.write(db, writeOptions, batch, $0) }
    }

    func nested(kept: ArraySlice<Int>, discarded: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        throw BenchError(description: "\(api.name) has no nested transactions")
    }

    func beginReads() throws {
        snapshot = api.snapshot(db)
        api.setSnapshot(readOptions, snapshot)
    }

    func endReads() {
        api.setSnapshot(readOptions, nil)
        api.releaseSnapshot(db, snapshot)
        snapshot = nil
    }

    func read(_ key: Int) throws -> Bool {
        try Workload.key(key).withUnsafeBytes { k in try Self.check(api, "get") { api.get(db, readOptions, k, $0, true) } }
    }

    func scanCount() throws -> Int {
        let iterator = api.iterator(db, readOptions)
        defer { api.destroyIterator(iterator) }
        var count = 0
        api.seekToFirst(iterator)
        while api.isValid(iterator) {
            count += 1
            api.next(iterator)
        }
        return count
    }

    var fdatasyncs: Int? { nil }

    func close() throws { api.close(db) }

    func makeReader() throws -> any BenchReader { LSMReader(api: api, db: db) }
}

/// A LevelDB or RocksDB reader: `Get` on the shared handle (thread-safe) with read
/// options of its own and no snapshot, so each read sees the newest write.
final class LSMReader: BenchReader {
    private let api: LSMFunctions
    private let db: OpaquePointer?
    private let readOptions: OpaquePointer?

    init(api: LSMFunctions, db: OpaquePointer?) {
        self.api = api
        self.db = db
        readOptions = api.makeReadOptions()
    }

    func read(_ key: Int) throws -> Bool {
        var message: UnsafeMutablePointer<CChar>?
        let found = Workload.key(key).withUnsafeBytes { k in api.get(db, readOptions, k, &message, false) }
        if let message {
            defer { api.free(message) }
            throw BenchError(description: "\(api.name) get: \(String(cString: message))")
        }
        return found
    }

    func scan(from key: Int, count: Int) throws -> (keys: Int, bytes: Int) {
        let iterator = api.iterator(db, readOptions)
        defer { api.destroyIterator(iterator) }
        Workload.key(key).withUnsafeBytes { api.seek(iterator, $0) }
        var seen = 0
        var bytes = 0
        while seen < count, api.isValid(iterator) {
            bytes &+= api.valueLength(iterator)
            seen += 1
            api.next(iterator)
        }
        return (seen, bytes)
    }

    func close() {}
}
