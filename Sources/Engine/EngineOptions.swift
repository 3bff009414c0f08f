// Settings of a storage engine.
import Logging
import StrataWAL

/// Settings of a `StorageEngine`.
public struct EngineOptions: Sendable {
    /// When a commit returns: `.full` (after fdatasync, the default) or `.relaxed`.
    public var durability: Durability = .full
    /// Page size of a new data file: a power of two in `Limits.pageBytesRange`. An
    /// existing file keeps its own.
    public var pageBytes = Limits.defaultPageBytes
    /// Bytes of pages the page cache may hold: every tree page where the data file is not
    /// mapped (`mapsDataFile` false, or a file system that maps nothing, such as the
    /// simulated one), and the expansions of compressed leaves (`leafCompression`). On
    /// the real file system raw pages are read through a mapping, held by the kernel's
    /// page cache. A scan or range query keeps its leaves here until they take a quarter
    /// of it, and holds the rest beside it, each only while it reads it: one long walk
    /// pushes out at most a quarter of what point reads come back to, and a store whose
    /// leaves take more than a quarter of the cache is expanded or copied again, past that
    /// quarter, by each scan of it. Default 64 MiB.
    public var cacheBytes = 64 << 20
    /// Whether tree pages and values are read where they lie in a mapping of the data
    /// file (the default, on a file system that maps files) or copied with `pread` into
    /// the page cache (`cacheBytes`). A mapping reads a page for the cost of a bounds check
    /// and a bit, but each page it read stays in the process's resident set until a
    /// checkpoint frees it or the store closes (the kernel gives such pages back under
    /// pressure, as it gives back its page cache; they count in a resident-set limit all
    /// the same). Without the mapping the data file's pages take at most `cacheBytes` of
    /// the process's memory, for a copy and a system call a page the cache misses.
    public var mapsDataFile = true
    /// How checkpoints store leaves whose cells outgrow a page. `.none` (the default)
    /// splits them: every leaf is searched where it lies in the mapped file. `.lz4` lets one
    /// page hold up to four pages of cells when they fit it LZ4-compressed, in pieces of
    /// about 1 KiB (FORMAT.md, "Compressed leaves"): the file takes fewer pages; a point
    /// read of such a leaf in the mapped file expands only the piece that would hold its
    /// key, and a cursor (or any read where the file is not mapped) expands the whole leaf
    /// once, into the page cache (`cacheBytes`) up to a quarter of it for one walk. Values
    /// too large for a leaf are stored
    /// as an LZ4 block in their overflow pages when that saves an eighth or more (a read of
    /// such a value expands it; a raw one is read where it lies in the mapped file). It applies to what a
    /// checkpoint writes; a store may hold both kinds, and every build of format 7 reads
    /// either, and leaves compressed by builds of formats 4 to 6. Raw leaves store the
    /// prefix their keys share once either way (FORMAT.md, "Elided prefixes").
    public var leafCompression = LeafCompression.none
    /// A checkpoint starts when the memtable holds this many bytes. Default 64 MiB. It
    /// starts sooner for small changes: the memtable's hash index, which finds a key the
    /// memtable holds in one or two memory accesses, has a slot per 64 bytes of this
    /// budget, and a checkpoint starts when 11/16 of them are taken (about 720,000 keys at
    /// 64 MiB: changes whose key and value average 66 bytes or less, as a record's index
    /// entries), so that the memtable is frozen while its index still finds every key it
    /// holds. (A memtable that fills its index while the checkpoint before it runs finds
    /// its keys through the skip list until it is frozen in turn.) A store that stopped
    /// writing checkpoints too, once 1,024 seeks in a row read a memtable of at least 1/16
    /// of this with no commit between them (`StorageEngine.checkpointIfQuiet`), or once it
    /// took no commit for `idleCheckpointDelay`.
    public var checkpointMemtableBytes = 64 << 20
    /// How long a store waits after its last commit before it checkpoints a memtable
    /// holding at least 1/16 of `checkpointMemtableBytes`, on a background thread
    /// (`StorageEngine.checkpointIfIdle`), or nil never to: at least 10 ms; default 1
    /// second. A timer ticks at this interval while the store takes commits, so the
    /// checkpoint starts between one and two intervals after the last commit. A store that
    /// stopped writing then reads its keys from the tree alone, replays nothing after a
    /// crash, and frees the memtable; one whose commits come less than this apart never
    /// starts one this way. The price: a store writing bursts of several MiB with pauses longer
    /// than this between them checkpoints after each burst, where it would have waited
    /// for the budget to fill, so each checkpoint rewrites the leaves of fewer keys (at
    /// most 16 such checkpoints for one budget's worth of changes).
    public var idleCheckpointDelay: Duration? = .seconds(1)
    /// The most bytes the memtable taking commits may hold while a checkpoint runs, or nil
    /// (the default) for no bound. A commit that leaves it fuller returns only once that
    /// checkpoint ended, or froze this memtable if it had not yet (a write stall, as an LSM stalls writes while its memtables are
    /// full), so the memtables together stay under about twice this however far random
    /// writes outrun the checkpoints. Without a bound the memtable grows for as long as a
    /// checkpoint runs, and a checkpoint of random writes rewrites most of a large tree:
    /// at 10M keys it grew to 277 MB beside a frozen one of 221 MB. The bound costs
    /// throughput and latency there: at 10M keys, 128 MiB gave 262k keys/s against 623k,
    /// a peak RSS of 443 MB against 752, and a commit that waited 5.4 s. For a device
    /// where memory is the limit; at least `checkpointMemtableBytes`.
    public var maxMemtableBytes: Int?
    /// Whether each checkpoint ends by asking the C library to give the memory freed in the
    /// process back to the system (glibc's `malloc_trim`; elsewhere this does nothing). A
    /// checkpoint's working memory (the leaves it rewrites, decoded) is freed on its own
    /// thread, and malloc keeps the pages of each thread's heap that were ever used (updating
    /// a million records, the heaps held 20 MB; at 300,000, massif found at most 12 MB in
    /// use, 2.4 MB of it the benchmark's own). The call costs a walk of malloc's heaps per
    /// checkpoint, under 0.1 % of a record update's time; it gives back the application's
    /// freed memory too. Default false.
    public var returnsFreedMemory = false
    /// A checkpoint starts when the log grew this much since the last one. Default 256 MiB.
    public var checkpointLogBytes = 256 << 20
    /// Settings of the write-ahead log (its durability and logger follow `durability` and
    /// `logger`). A store keeps history by default (`log.history`: `HistoryRetention()`),
    /// where a bare log keeps none.
    public var log = WALOptions.storeDefault
    /// Where the store logs opening and recovery, checkpoints, released log segments and
    /// failed I/O. Default: `Logger.strataSilent` (nothing); pass `Logger(label: "strata")`
    /// to log through the application's swift-log handler.
    public var logger = Logger.strataSilent
    /// Set only by `compact`, which builds its copy in a directory marked `INCOMPLETE`.
    var completingCopy = false
    /// Set only by tests of stores an older build wrote: checkpoints write values too
    /// large for a leaf as chains of pages (format 4), not runs.
    var writesOverflowChains = false

    public init(durability: Durability = .full) {
        self.durability = durability
    }

    /// Settings for a process whose memory is the limit: a phone, an app extension, a
    /// small container. The defaults buy speed with memory: a 64 MiB memtable that grows
    /// while a checkpoint runs, a frozen one beside it, and every page read kept in the
    /// resident set through the mapping. These start a checkpoint when the memtable holds
    /// 4 MiB and let the next one reach 8 MiB while it runs, commits waiting beyond that
    /// (so the two memtables, the one a checkpoint writes and the one taking commits, hold
    /// up to 16 MiB together when random writes outrun the checkpoints), and read the data
    /// file with `pread` through a page cache of 4 MiB, so what the store holds no longer
    /// grows with its data file, and each checkpoint gives malloc's free pages back
    /// (`returnsFreedMemory`); the price is more checkpoints and a copy of each page the
    /// cache misses.
    /// Measured at a million records (Benchmarks/RESULTS.md, "A store in a small
    /// footprint"): peak resident sets of 66–105 MB, 1.00–1.89 × SQLite's in the same run,
    /// against 199–336 MB with the defaults, at 0.35–1.04 × their rates; at a million
    /// random keys, point reads at 0.28 ×. At 100,000 records (RESULTS.md, "A checkpoint's
    /// groups of leaves bounded"): 50–56 MB, 1.29–1.47 × SQLite's.
    public static var smallFootprint: EngineOptions {
        var options = EngineOptions()
        options.checkpointMemtableBytes = 4 << 20
        options.maxMemtableBytes = 8 << 20
        options.cacheBytes = 4 << 20
        options.mapsDataFile = false
        options.returnsFreedMemory = true
        return options
    }

    func validate() throws(EngineError) {
        guard Limits.pageBytesRange.contains(pageBytes), pageBytes & (pageBytes - 1) == 0 else {
            throw .invalidOptions("pageBytes must be a power of two from 4096 to 65536 (got \(pageBytes))")
        }
        guard cacheBytes >= 0, checkpointMemtableBytes > 0, checkpointLogBytes > 0 else {
            throw .invalidOptions("cacheBytes must not be negative and the checkpoint thresholds must be positive")
        }
        if let idleCheckpointDelay, idleCheckpointDelay < .milliseconds(10) {
            throw .invalidOptions("idleCheckpointDelay must be at least 10 ms (got \(idleCheckpointDelay)), or nil for no idle checkpoints")
        }
        if let maxMemtableBytes, maxMemtableBytes < checkpointMemtableBytes {
            throw .invalidOptions("maxMemtableBytes (\(maxMemtableBytes)) must be at least checkpointMemtableBytes (\(checkpointMemtableBytes)), or nil for no bound")
        }
    }
}

/// How a checkpoint stores a leaf whose cells outgrow a page (`EngineOptions.leafCompression`).
public enum LeafCompression: Sendable, Hashable {
    /// Splits it into leaves of one page each, read in place.
    case none
    /// Stores up to four pages of cells as one LZ4 block in one page when it fits.
    case lz4
}
