// The data of Benchmarks/README.md: 16-byte keys (the key number, zero-padded decimal) and values
// of V bytes, half random and half one repeated byte, so a good compressor halves them.
import Foundation
import Histogram
import Strata
import StrataTesting
import Synchronization

enum Workload {
    /// `--touch-values`: whether a read of readrandom reads every byte of its value.
    static let touchValues = Atomic(false)
    /// The memory settings of the command line (`--memtable-mib`, `--max-memtable-mib`,
    /// `--cache-mib`, `--unmapped`), set once before any workload runs.
    struct Memory: Sendable {
        var memtableBytes: Int?
        var maxMemtableBytes: Int?
        var cacheBytes: Int?
        var mapsDataFile = true
        /// `--idle-checkpoint-ms`: nil for the default, `.some(nil)` for never.
        var idleCheckpointDelay: Duration?? = nil
    }

    static let memory = Mutex(Memory())

    /// The options Strata engine `engine` of the benchmarks opens with: the defaults, or
    /// `EngineOptions.smallFootprint` for `strata-small`; `durability`; and the memory
    /// settings of the command line over them.
    static func strataOptions(engine: String = "strata", durability: Durability = .full) -> EngineOptions {
        var options = engine == "strata-small" ? EngineOptions.smallFootprint : EngineOptions()
        options.durability = durability
        let memory = memory.withLock { $0 }
        if let memtableBytes = memory.memtableBytes { options.checkpointMemtableBytes = memtableBytes }
        if let maxMemtableBytes = memory.maxMemtableBytes { options.maxMemtableBytes = maxMemtableBytes }
        if let cacheBytes = memory.cacheBytes { options.cacheBytes = cacheBytes }
        if !memory.mapsDataFile { options.mapsDataFile = false }
        if let idleCheckpointDelay = memory.idleCheckpointDelay { options.idleCheckpointDelay = idleCheckpointDelay }
        return options
    }

    /// Where touched bytes are summed, so that no read is optimized away.
    private static let touchedSum = Atomic(0)

    /// Reads every byte of `value` (eight at a time) when values are touched; `value`'s
    /// length otherwise. Each engine's readrandom calls it on the value it found.
    @inline(__always)
    static func touch(_ value: UnsafeRawBufferPointer) -> Int {
        guard touchValues.load(ordering: .relaxed), let base = value.baseAddress else { return value.count }
        var sum = 0
        var offset = 0
        while offset + 8 <= value.count {
            sum &+= Int(truncatingIfNeeded: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            offset += 8
        }
        while offset < value.count {
            sum &+= Int(base.load(fromByteOffset: offset, as: UInt8.self))
            offset += 1
        }
        touchedSum.wrappingAdd(sum, ordering: .relaxed)
        return value.count
    }

    /// The 16 ASCII digits of `number` (0 ≤ `number` < 10¹⁶) in one array: building keys is
    /// inside every timed loop, for every engine alike, so it is kept to one allocation
    /// (through `String` it took four, ~1,000 instructions a read). The digits are written
    /// on the stack and copied into the array: an array made with
    /// `init(unsafeUninitializedCapacity:initializingWith:)` looks up its storage class in
    /// the runtime's metadata cache each time (about 690 instructions a key under callgrind,
    /// a tenth of a fill's; 51–65 ns against 31 ns for the copy, timed alone).
    static func key(_ number: Int) -> [UInt8] {
        precondition(number >= 0 && number < 10_000_000_000_000_000, "a key number has at most 16 digits")
        var digits: (UInt64, UInt64) = (0, 0)
        return withUnsafeMutableBytes(of: &digits) { digits in
            var rest = number
            for index in (0..<16).reversed() {
                digits[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            }
            return [UInt8](UnsafeRawBufferPointer(digits))
        }
    }

    /// The values a workload cycles through: one per key up to 10,000 of them, and no
    /// more than 64 MiB in all (at least one), so that values of up to 1 MiB fit.
    static func values(count keys: Int, bytes: Int, random: inout SplitMix64) -> [[UInt8]] {
        let count = max(1, min(keys, 10_000, (64 << 20) / max(bytes, 1)))
        return (0..<count).map { _ in value(bytes, random: &random) }
    }

    static func value(_ bytes: Int, random: inout SplitMix64) -> [UInt8] {
        let half = bytes / 2
        let randomHalf = (0..<half).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        return randomHalf + [UInt8](repeating: UInt8(truncatingIfNeeded: random.next()), count: bytes - half)
    }
}

/// One measurement, printed as one JSON line (Benchmarks/README.md, "Output").
struct Result {
    var engine: String
    var bench: String
    var num: Int
    var batch: Int
    var valueSize: Int
    var seconds: Double
    var bytesOnDisk: Int
    var fdatasyncs: Int?
    /// Latency of each transaction (write workloads) or read (`readrandom`), when measured.
    var latency: Latencies? = nil
    /// The peak resident set of the process that ran this measurement alone (its untimed
    /// fill included), in KiB; nil when the process ran other measurements too.
    var peakRSSKilobytes: Int? = nil
    /// `readwhilewriting`: keys the writer committed per second while the readers read.
    var writesPerSecond: Double? = nil
    /// `readwhilewriting --interleave`: keys the writer committed per second in the phases
    /// in which no reader read, in the same run.
    var writesAlonePerSecond: Double? = nil
    /// `fillsync-concurrent --interleave`: one-key commits a second of a single committer,
    /// in turns with the T committers of the row.
    var oneCommitterPerSecond: Double? = nil
    /// Bytes the store's block device wrote from the workload's start through the engine's
    /// close (`deviceWrittenBytes(of:)`), ÷ the keys and values it wrote;
    /// nil for workloads that write nothing, or where the system does not count.
    var writeAmplification: Double? = nil
    /// Bytes on disk after the close ÷ the keys and values the store then holds; nil when
    /// it holds none.
    var spaceAmplification: Double? = nil
    /// `overwrite --seconds`: keys written per second in each 10-second interval.
    var intervals: [Int]? = nil

    var opsPerSecond: Double { Double(num) / seconds }

    /// The line, made by `JSONEncoder`.
    var json: String {
        get throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return String(decoding: try encoder.encode(self), as: UTF8.self)
        }
    }
}

extension Result: Codable {
    enum CodingKeys: String, CodingKey {
        case engine, bench, num, batch, valueSize = "value_size", seconds, opsPerSecond = "ops_per_sec"
        case bytesOnDisk = "bytes_on_disk", fdatasyncs, latency = "latency_us", peakRSSKilobytes = "peak_rss_kb"
        case writesPerSecond = "writes_per_sec", writesAlonePerSecond = "writes_alone_per_sec"
        case oneCommitterPerSecond = "one_committer_per_sec"
        case writeAmplification = "write_amp", spaceAmplification = "space_amp"
        case intervals = "interval_ops_per_sec"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(engine, forKey: .engine)
        try container.encode(bench, forKey: .bench)
        try container.encode(num, forKey: .num)
        try container.encode(batch, forKey: .batch)
        try container.encode(valueSize, forKey: .valueSize)
        try container.encode(rounded(seconds, 4), forKey: .seconds)
        try container.encode(Int(opsPerSecond), forKey: .opsPerSecond)
        try container.encode(bytesOnDisk, forKey: .bytesOnDisk)
        try container.encode(fdatasyncs, forKey: .fdatasyncs)
        try container.encodeIfPresent(latency, forKey: .latency)
        try container.encodeIfPresent(peakRSSKilobytes, forKey: .peakRSSKilobytes)
        try container.encodeIfPresent(writesPerSecond.map { Int($0) }, forKey: .writesPerSecond)
        try container.encodeIfPresent(writesAlonePerSecond.map { Int($0) }, forKey: .writesAlonePerSecond)
        try container.encodeIfPresent(oneCommitterPerSecond.map { Int($0) }, forKey: .oneCommitterPerSecond)
        try container.encodeIfPresent(writeAmplification.map { rounded($0, 2) }, forKey: .writeAmplification)
        try container.encodeIfPresent(spaceAmplification.map { rounded($0, 2) }, forKey: .spaceAmplification)
        try container.encodeIfPresent(intervals, forKey: .intervals)
    }

    /// Reads back one line of `json` (the ops/s figure is derived, so it is not read).
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(engine: try container.decode(String.self, forKey: .engine),
                  bench: try container.decode(String.self, forKey: .bench),
                  num: try container.decode(Int.self, forKey: .num),
                  batch: try container.decode(Int.self, forKey: .batch),
                  valueSize: try container.decode(Int.self, forKey: .valueSize),
                  seconds: try container.decode(Double.self, forKey: .seconds),
                  bytesOnDisk: try container.decode(Int.self, forKey: .bytesOnDisk),
                  fdatasyncs: try container.decodeIfPresent(Int.self, forKey: .fdatasyncs),
                  latency: try container.decodeIfPresent(Latencies.self, forKey: .latency),
                  peakRSSKilobytes: try container.decodeIfPresent(Int.self, forKey: .peakRSSKilobytes),
                  writesPerSecond: try container.decodeIfPresent(Int.self, forKey: .writesPerSecond).map(Double.init),
                  writesAlonePerSecond: try container.decodeIfPresent(Int.self, forKey: .writesAlonePerSecond).map(Double.init),
                  oneCommitterPerSecond: try container.decodeIfPresent(Int.self, forKey: .oneCommitterPerSecond).map(Double.init),
                  writeAmplification: try container.decodeIfPresent(Double.self, forKey: .writeAmplification),
                  spaceAmplification: try container.decodeIfPresent(Double.self, forKey: .spaceAmplification),
                  intervals: try container.decodeIfPresent([Int].self, forKey: .intervals))
    }

    init(jsonLine: String) throws {
        self = try JSONDecoder().decode(Result.self, from: Data(jsonLine.utf8))
    }
}

/// Percentiles of one workload's operation latencies, in microseconds.
struct Latencies: Codable, Equatable {
    var p50: Double
    var p99: Double
    var p999: Double
    var max: Double
    /// How many operations took more than 10 × the p99 (the bound issue 43 puts on the
    /// slowest commit of a sustained overwrite), to the histogram's precision: how rare
    /// the slowest are, which the max alone does not say. Nil in results written before
    /// it was counted.
    var beyondTenTimesP99: Int?

    enum CodingKeys: String, CodingKey {
        case p50, p99, p999 = "p99_9", max, beyondTenTimesP99 = "beyond_10x_p99"
    }

    /// From a histogram of nanoseconds.
    init(_ histogram: Histogram<UInt64>) {
        func micros(_ nanoseconds: UInt64) -> Double { rounded(Double(nanoseconds) / 1_000, 1) }
        p50 = micros(histogram.valueAtPercentile(50))
        p99 = micros(histogram.valueAtPercentile(99))
        p999 = micros(histogram.valueAtPercentile(99.9))
        max = micros(histogram.max)
        let bound = 10 * histogram.valueAtPercentile(99)
        beyondTenTimesP99 = histogram.max > bound ? Int(histogram.count(within: (bound + 1)...histogram.max)) : 0
    }

    var text: String { "\(p50) / \(p99) / \(p999) / \(max)" }
}

/// The most this process has had resident so far, in KiB (`getrusage`'s `ru_maxrss`).
func peakResidentKilobytes() -> Int {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return usage.ru_maxrss
}

/// A monotonic clock reading in nanoseconds (cheap enough to take around each operation).
func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

func rounded(_ value: Double, _ places: Int) -> Double {
    var scale = 1.0
    for _ in 0..<places { scale *= 10 }
    return (value * scale).rounded() / scale
}

/// Waits until the block device that holds `path` has been quiet for `quiet`, or for
/// `limit` at most, and returns its count then (`deviceWrittenBytes`). Quiet is less than
/// 64 KiB written between two looks a quarter second apart (each after a `sync()`): the
/// system's own small writes, journal commits of its logs, go on meanwhile. A workload
/// that starts from a prepared store calls it first, so that what the preparation left
/// running (a checkpoint of the fill's last memtable, an LSM's flushes and compactions)
/// is neither counted as the workload's writes nor run beside its first operations.
/// `quiet` outlasts Strata's idle checkpoint delay (1 s), which would otherwise start
/// once the wait ended: Strata's last memtable of the fill is checkpointed in the wait,
/// where LevelDB and RocksDB, which flush a memtable only when it fills, keep theirs
/// (up to 4 MiB and 64 MiB) and flush it within the workload.
func settledDeviceWrittenBytes(of path: String, quiet: Duration = .seconds(2), limit: Duration = .seconds(60)) -> Int? {
    guard var last = deviceWrittenBytes(of: path) else { return nil }
    let clock = ContinuousClock()
    let deadline = clock.now + limit
    var quietSince = clock.now
    while clock.now < deadline {
        Thread.sleep(forTimeInterval: 0.25)
        guard let now = deviceWrittenBytes(of: path) else { return nil }
        if now - last >= 64 << 10 {
            quietSince = clock.now
        } else if quietSince.duration(to: clock.now) >= quiet {
            return now
        }
        last = now
    }
    FileHandle.standardError.write(Data("the device did not go quiet in \(limit): the workload starts now\n".utf8))
    return last
}

/// Bytes written to the block device that holds `path`, after a `sync()` has sent every
/// dirty page of the system to it: sectors written (`/sys/dev/block/MAJOR:MINOR/stat`,
/// its seventh field) × 512, file system journal included. The device's count, not the
/// process's: `/proc/self/io`'s `write_bytes` is counted as pages are dirtied, a whole
/// large folio at a time, and reported 34–147 × for one workload whose device wrote
/// 6.7 × (small durable commits). Nil where the system does not say. Other processes'
/// writes count too, so measure on a quiet machine.
func deviceWrittenBytes(of path: String) -> Int? {
    sync()
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    let device = UInt64(status.st_dev)
    let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff)
    let minor = (device & 0xff) | ((device >> 12) & ~0xff)
    guard let text = try? String(contentsOfFile: "/sys/dev/block/\(major):\(minor)/stat", encoding: .utf8) else { return nil }
    let fields = text.split(separator: " ")
    guard fields.count > 6, let sectors = Int(fields[6]) else { return nil }
    return sectors * 512
}
