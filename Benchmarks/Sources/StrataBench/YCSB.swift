// YCSB's core workloads (Cooper et al., "Benchmarking Cloud Serving Systems with YCSB",
// SoCC 2010) over each engine's key/value API: an untimed load of --num records of
// --value-size bytes (1,000 by default) in transactions of --batch, then --operations
// operations, timed, from --threads threads (1 by default):
//  - ycsb-a: 50 % reads, 50 % updates (update heavy);
//  - ycsb-b: 95 % reads, 5 % updates (read mostly);
//  - ycsb-c: reads only;
//  - ycsb-d: 95 % reads, 5 % inserts, reads skewed to the newest records (read latest);
//  - ycsb-e: 95 % scans of 1–100 keys (uniform), 5 % inserts (short ranges);
//  - ycsb-f: 50 % reads, 50 % read-modify-writes.
// Keys are picked Zipfian (θ = 0.99, the popular keys scattered over the key space by a
// hash, as YCSB's scrambled generator does) unless --distribution says otherwise; ycsb-d
// picks "latest" (Zipfian ranks counted back from the newest insert). Every update,
// insert and read-modify-write is its own durable transaction, as a request of a service
// would be; every read and scan sees the newest acknowledged write (no snapshot held).
// Each thread reads through a reader of its own (`BenchEngine.makeReader`).
//
// Every read must find its key, every scan must see as many keys as the store then holds
// from its start (up to its length) with values of the right size, and the store must hold
// the loaded and inserted records at the end.
import ArgumentParser
import Foundation
import Histogram
import StrataTesting
import Synchronization

enum YCSB {
    /// How keys are picked.
    enum Distribution: String, ExpressibleByArgument, Sendable {
        case uniform, zipfian, latest
    }

    /// The share of each operation in a workload (they add up to 1).
    struct Mix {
        var read = 0.0
        var update = 0.0
        var insert = 0.0
        var scan = 0.0
        var readModifyWrite = 0.0
        var distribution = Distribution.zipfian

        init(_ workload: String) throws {
            switch workload {
            case "ycsb-a": (read, update) = (0.5, 0.5)
            case "ycsb-b": (read, update) = (0.95, 0.05)
            case "ycsb-c": read = 1
            case "ycsb-d": (read, insert, distribution) = (0.95, 0.05, .latest)
            case "ycsb-e": (scan, insert) = (0.95, 0.05)
            case "ycsb-f": (read, readModifyWrite) = (0.5, 0.5)
            default: throw BenchError(description: "no YCSB workload \(workload)")
            }
        }
    }

    /// The longest scan of ycsb-e (lengths are uniform in 1 … this).
    static let longestScan = 100
}

/// Zipfian ranks in 0..<n, rank 0 the most popular, θ = 0.99: the generator of Gray et
/// al., "Quickly Generating Billion-Record Synthetic Databases" (SIGMOD 1994), as YCSB
/// implements it. Making one costs O(n) (the ζ sum); each draw O(1).
struct ZipfianRanks: Sendable {
    let count: Int
    private let theta = 0.99
    private let zetaN: Double
    private let alpha: Double
    private let eta: Double
    private let secondRankBound: Double

    init(count: Int) {
        precondition(count >= 1, "a Zipfian distribution needs at least one item")
        self.count = count
        var zeta = 0.0
        for rank in 1...count { zeta += 1 / pow(Double(rank), theta) }
        zetaN = zeta
        let zeta2 = 1 + 1 / pow(2, theta)
        alpha = 1 / (1 - theta)
        eta = (1 - pow(2 / Double(count), 1 - theta)) / (1 - zeta2 / zeta)
        secondRankBound = 1 + pow(0.5, theta)
    }

    func next(_ random: inout SplitMix64) -> Int {
        let u = Double(random.next() >> 11) / Double(1 << 53)
        let uz = u * zetaN
        if uz < 1 { return 0 }
        if uz < secondRankBound { return min(1, count - 1) }
        return min(count - 1, Int(Double(count) * pow(eta * u - eta + 1, alpha)))
    }
}

/// 64-bit FNV-1a of an integer's eight bytes: scatters Zipfian ranks over the key space.
func fnv1a64(_ value: Int) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    var rest = UInt64(bitPattern: Int64(value))
    for _ in 0..<8 {
        hash = (hash ^ (rest & 0xff)) &* 0x0000_0100_0000_01b3
        rest >>= 8
    }
    return hash
}

/// The records that exist during a run: the loaded `0..<loaded` and the inserts
/// acknowledged so far. Inserts take the next key numbers in turn and may finish out of
/// order (from several threads); `acknowledged` counts the prefix of keys all finished,
/// and only those are read, so a read never asks for a key whose insert is in flight.
final class YCSBKeys: Sendable {
    private struct State {
        var next: Int
        var acknowledged: Int
        var finished: Set<Int> = []
    }
    private let state: Mutex<State>

    init(loaded: Int) { state = Mutex(State(next: loaded, acknowledged: loaded)) }

    /// The number of the next key to insert.
    func claim() -> Int { state.withLock { state in defer { state.next += 1 }; return state.next } }

    /// Marks `key`'s insert acknowledged.
    func finish(_ key: Int) {
        state.withLock { state in
            state.finished.insert(key)
            while state.finished.remove(state.acknowledged) != nil { state.acknowledged += 1 }
        }
    }

    /// How many keys exist for certain: `0..<acknowledged`.
    var acknowledged: Int { state.withLock { $0.acknowledged } }
    /// How many keys have been claimed, inserted or not.
    var claimed: Int { state.withLock { $0.next } }
}

extension Runner {
    /// One YCSB workload (see the top of this file).
    func ycsb() throws -> Result {
        var chosenMix = try YCSB.Mix(workload)
        if let chosen = options.distribution { chosenMix.distribution = chosen }
        let mix = chosenMix
        let records = options.num ?? 1_000_000
        let operations = options.operations
        let threads = max(1, options.threads ?? 1)
        let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bench = try makeEngine(directory: directory, keys: records)
        var random = SplitMix64(seed: options.seed)
        let values = Workload.values(count: records, bytes: valueSize, random: &random)
        let value: @Sendable (Int) -> [UInt8]? = { values[$0 % values.count] }
        for start in stride(from: 0, to: records, by: options.batch) {
            try bench.write(ArraySlice(start..<min(records, start + options.batch)), values: value)
        }
        let picker = KeyPicker(mix.distribution, records: records)
        let keys = YCSBKeys(loaded: records)
        let readers = try (0..<threads).map { _ in try bench.makeReader() }
        let shared = UncheckedReaders(readers)
        let latencies = LatencyRecorder()
        let failure = Mutex<String?>(nil)
        let writes = Atomic(0)
        let group = DispatchGroup()
        let valueBytes = valueSize
        let seed = options.seed
        let writtenBefore = deviceWrittenBytes(of: options.dir)
        let start = ContinuousClock.now
        for thread in 0..<threads {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                let reader = shared.readers[thread]
                var random = SplitMix64(seed: seed &+ 7_919 &* UInt64(thread + 1))
                var histogram = Histogram<UInt64>.latencies()
                defer { latencies.add(histogram) }
                /// An existing key, picked by the distribution.
                func pick() -> Int { picker.pick(&random, existing: keys.acknowledged) }
                func read(_ key: Int) throws {
                    guard try reader.read(key) else { throw BenchError(description: "key \(key) was not found") }
                }
                func write(_ key: Int) throws {
                    try bench.write([key], values: value)
                    writes.add(1, ordering: .relaxed)
                }
                do {
                    for _ in stride(from: thread, to: operations, by: threads) {
                        let choice = Double(random.next() >> 11) / Double(1 << 53)
                        let before = monotonicNanoseconds()
                        if choice < mix.read {
                            try read(pick())
                        } else if choice < mix.read + mix.update {
                            try write(pick())
                        } else if choice < mix.read + mix.update + mix.readModifyWrite {
                            let key = pick()
                            try read(key)
                            try write(key)
                        } else if choice < mix.read + mix.update + mix.readModifyWrite + mix.scan {
                            let first = pick()
                            let length = 1 + Int(random.next() % UInt64(YCSB.longestScan))
                            // Keys first ..< acknowledged surely exist, and keys are numbered in key order.
                            let least = min(length, keys.acknowledged - first)
                            let (seen, bytes) = try reader.scan(from: first, count: length)
                            guard seen >= least, seen <= length, bytes == seen * valueBytes else {
                                throw BenchError(description: "a scan of \(length) from key \(first) saw \(seen) keys, \(bytes) bytes")
                            }
                        } else {
                            let key = keys.claim()
                            try write(key)
                            keys.finish(key)
                        }
                        _ = histogram.record(monotonicNanoseconds() - before)
                    }
                } catch {
                    failure.withLock { $0 = $0 ?? "\(error)" }
                }
            }
        }
        group.wait()
        let elapsed = start.duration(to: .now)
        for reader in readers { reader.close() }
        if let message = failure.withLock({ $0 }) { throw BenchError(description: "\(engine) \(workload): \(message)") }
        let stored = try bench.scanCount()
        guard stored == keys.claimed else {
            throw BenchError(description: "\(engine) \(workload) holds \(stored) records, not \(keys.claimed)")
        }
        let syncs = bench.fdatasyncs
        try bench.close()
        let written = writtenBefore.flatMap { before in deviceWrittenBytes(of: options.dir).map { $0 - before } }
        let bytesOnDisk = directoryBytes(directory)
        let pairBytes = Workload.key(0).count + valueSize
        let userBytes = writes.load(ordering: .relaxed) * pairBytes
        let histogram = latencies.histogram.withLock { $0 }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Result(engine: engine, bench: workload, num: operations, batch: 1, valueSize: valueSize, seconds: seconds,
                      bytesOnDisk: bytesOnDisk, fdatasyncs: syncs, latency: histogram.totalCount > 0 ? Latencies(histogram) : nil,
                      writeAmplification: userBytes > 0 ? written.map { Double($0) / Double(userBytes) } : nil,
                      spaceAmplification: Double(bytesOnDisk) / Double(stored * pairBytes))
    }
}
