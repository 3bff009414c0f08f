// swift-tools-version: 6.2
// Strata's throughput benchmarks: a package of their own, so the library never depends on
// a benchmark peer. From the repository root:
//   scripts/bootstrap libsqlite3-dev liblmdb-dev libleveldb-dev librocksdb-dev
//   swift run -c release --package-path Benchmarks strata-bench --table
import PackageDescription

let package = Package(
    name: "StrataBenchmarks",
    dependencies: [
        .package(name: "Strata", path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // Latency percentiles per workload (HdrHistogram).
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        // The `grdb` engine of the record workloads: the Swift SQLite library app developers know.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    ],
    targets: [
        // The peers, through their C APIs (Debian/Ubuntu: libsqlite3-dev, liblmdb-dev,
        // libleveldb-dev, librocksdb-dev).
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLMDB", path: "Sources/CLMDB", pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(name: "CLevelDB", path: "Sources/CLevelDB", providers: [.apt(["libleveldb-dev"])]),
        .systemLibrary(name: "CAffinity", path: "Sources/CAffinity"),
        .systemLibrary(name: "CRocksDB", path: "Sources/CRocksDB", pkgConfig: "rocksdb", providers: [.apt(["librocksdb-dev"])]),
        .executableTarget(
            name: "strata-bench",
            dependencies: [
                "CSQLite", "CLMDB", "CLevelDB", "CRocksDB", "CAffinity",
                .product(name: "Strata", package: "Strata"),
                // The `etcd` engine: a store over etcd, on an etcd this run starts (EtcdProcess).
                .product(name: "StrataEtcd", package: "Strata"),
                // The seeded generator (SplitMix64) the workloads draw keys and values from.
                .product(name: "StrataTesting", package: "Strata"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Sources/StrataBench"
        ),
    ],
    swiftLanguageModes: [.v6]
)
