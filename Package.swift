// swift-tools-version: 6.2
//
// Strata: an embedded, transactional key/value and record store for Swift with nested
// contexts and units of work. Layers point downward only (docs/Layout.md):
//   strata (CLI) → StrataTesting → Strata (umbrella) → StrataRecords → StrataContexts → StrataEngine
//   → StrataWAL → StrataFileIO / StrataCodec → C shims; StrataEtcd sits beside the engine,
//   under contexts' storage seam.
//
// Products are what an application or its tests use: `Strata` (import Strata) and
// `StrataTesting` (the crash harness and the decoders' fuzz entry points), plus the
// `strata` tool. The layers beneath are modules of their own, named `Strata…` so they
// never clash with an application's targets, and not products: `Strata` re-exports by name
// the few of their types that appear in its API (Sources/Strata/Exports.swift). The folder
// names are fixed by the project card; each target's `path:` maps it to its module name.
import PackageDescription

let package = Package(
    name: "Strata",
    // Linux is built and tested (README.md, "Platforms"). macOS has its platform code paths
    // (Sources/CPlatform) but is not built here; the other Apple platforms have no system
    // liblz4 and are not supported.
    platforms: [.macOS(.v15)],
    products: [
        // What applications import: the store, contexts, units of work, records.
        .library(name: "Strata", targets: ["Strata"]),
        // The crash harness for Strata and for applications' own units of work.
        .library(name: "StrataTesting", targets: ["StrataTesting"]),
        // The same contexts, units of work and records over etcd, for several servers sharing one state.
        .library(name: "StrataEtcd", targets: ["StrataEtcd"]),
        .executable(name: "strata", targets: ["StrataCLI"]),
    ],
    dependencies: [
        // The ecosystem's standard for command-line parsing; used by the `strata` tool only.
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The ecosystem's logging API: recovery, checkpoints, recycled segments and failed
        // syncs are logged under the label "strata"; silent unless the app bootstraps a handler.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // `swift package generate-documentation --target Strata` (Sources/Strata/Strata.docc).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // Atomic loads and stores on the memtable's arena memory (its skip list's links).
        .package(url: "https://github.com/apple/swift-atomics", from: "1.3.0"),
        // HTTP/1.1 to etcd's JSON gateway (StrataEtcd only; Sources/Etcd/EtcdClient.swift says why not gRPC).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // TLS to etcd (StrataEtcd): the configuration AsyncHTTPClient's connections take. Also
        // what StrataTesting makes an etcd cluster's certificates with (swift-certificates and
        // swift-crypto, which swift-nio-ssl already builds).
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
    ],
    targets: [
        // liblz4 from the system (Debian/Ubuntu: liblz4-dev).
        .systemLibrary(
            name: "CStrataLZ4",
            path: "Sources/CLZ4",
            pkgConfig: "liblz4",
            providers: [.apt(["liblz4-dev"]), .brew(["lz4"])]
        ),
        // libedit from the system (Debian/Ubuntu: libedit-dev): line editing and history in the shell.
        .systemLibrary(
            name: "CStrataEditLine",
            path: "Sources/CEditLine",
            pkgConfig: "libedit",
            providers: [.apt(["libedit-dev"])]
        ),
        // Hardware CRC32C with a software fallback, and the syscalls the C library hides (fallocate).
        .target(name: "CStrataPlatform", path: "Sources/CPlatform"),
        // Checksums, LZ4 blocks and bounded little-endian coding shared by every on-disk format.
        .target(name: "StrataCodec", dependencies: ["CStrataLZ4", "CStrataPlatform"], path: "Sources/Codec"),
        // Locks that park waiters instead of spinning (pthread mutex and condition variable).
        .target(name: "StrataLocks", path: "Sources/Locks"),
        // The file-system seam: POSIX implementation and a deterministic simulated one.
        .target(name: "StrataFileIO", dependencies: ["CStrataPlatform", "StrataLocks"], path: "Sources/FileIO"),
        // The LZ4-compressed, checksummed write-ahead log with group commit.
        .target(
            name: "StrataWAL",
            dependencies: ["StrataCodec", "StrataFileIO", "StrataLocks", .product(name: "Logging", package: "swift-log")],
            path: "Sources/WAL"
        ),
        // The storage engine: page file, copy-on-write B+tree, memtables, snapshots, checkpoints.
        .target(
            name: "StrataEngine",
            dependencies: [
                "StrataWAL", "StrataCodec", "StrataFileIO", "StrataLocks", "CStrataPlatform",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Atomics", package: "swift-atomics"),
            ],
            path: "Sources/Engine"
        ),
        // The store, nested contexts and units of work, observation and the change feed, over
        // the storage seam (the engine, or etcd); and the `package` seam the records layer uses.
        .target(
            name: "StrataContexts",
            dependencies: ["StrataEngine", "StrataWAL", "StrataFileIO", "StrataLocks"],
            path: "Sources/Contexts"
        ),
        // Records: Codable types, repositories, indexes and the planner, relationships,
        // aggregates, the typed feed and migrations, above contexts.
        .target(
            name: "StrataRecords",
            dependencies: ["StrataContexts", "StrataEngine", "StrataWAL", "StrataLocks", "StrataCodec"],
            path: "Sources/Records"
        ),
        // What applications import: contexts and records, and the few types of the layers
        // beneath that their API shows (Sources/Strata/Exports.swift).
        .target(
            name: "Strata",
            dependencies: ["StrataContexts", "StrataRecords", "StrataEngine", "StrataWAL", "StrataFileIO"],
            path: "Sources/Strata"
        ),
        // Contexts, units of work and records over etcd v3: a replica of the store's prefix kept
        // current by etcd's Watch serves the reads; root commits are etcd transactions.
        .target(
            name: "StrataEtcd",
            dependencies: [
                "StrataContexts", "StrataEngine", "StrataWAL", "StrataFileIO",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/Etcd"
        ),
        // The crash harness: workloads, suites under the whole fault model, process kills;
        // and the entry points of the decoders' fuzz targets (Fuzz/).
        .target(
            name: "StrataTesting",
            dependencies: [
                "Strata", "StrataContexts", "StrataEngine", "StrataWAL", "StrataFileIO", "StrataCodec", "StrataLocks",
                "CStrataPlatform",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]
        ),
        .executableTarget(
            name: "StrataCLI",
            dependencies: [
                "Strata", "StrataTesting", "StrataEngine", "StrataWAL", "StrataFileIO", "CStrataEditLine",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "CodecTests", dependencies: ["StrataCodec", "StrataFileIO"]),
        .testTarget(name: "FileIOTests", dependencies: ["StrataFileIO"]),
        .testTarget(name: "WALTests", dependencies: ["StrataWAL", "StrataFileIO", "StrataCodec", "StrataLocks"]),
        .testTarget(
            name: "EngineTests",
            dependencies: [
                "StrataEngine", "StrataWAL", "StrataFileIO", "StrataCodec", "StrataLocks",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
        // Contexts and records are tested through the public API only, as an app uses them
        // (`import Strata`, plus `StrataTesting` for the crash harness).
        .testTarget(name: "ContextsTests", dependencies: ["Strata", "StrataContexts", "StrataTesting", "TestBackends", "ReaderBankProcess"]),
        // The writer and the readers of the reader bank test, each a process of its own.
        .executableTarget(name: "ReaderBankProcess", dependencies: ["Strata"], path: "Tests/ReaderBankProcess"),
        .testTarget(name: "StrataTestingTests", dependencies: ["StrataTesting"]),
        // What only a store over etcd has, and the two-process bank test; the tests start etcd.
        .testTarget(name: "EtcdTests", dependencies: ["Strata", "StrataEtcd", "StrataTesting", "TestBackends", "EtcdBankProcess",
                                                    .product(name: "NIOSSL", package: "swift-nio-ssl")]),
        // The backends the shared suites (contexts, units of work, records) run on: the
        // embedded engine and etcd, started by the tests themselves.
        .target(name: "TestBackends", dependencies: ["Strata", "StrataEtcd", "StrataTesting"], path: "Tests/TestBackends"),
        // One process of the two-process bank test (EtcdTests runs two and kills one).
        .executableTarget(
            name: "EtcdBankProcess",
            dependencies: ["Strata", "StrataEtcd", "StrataTesting"],
            path: "Tests/EtcdBankProcess"
        ),
        .testTarget(name: "RecordsTests", dependencies: ["Strata", "StrataRecords", "StrataTesting", "TestBackends", "OutboxProcess"]),
        // The producer and consumer the outbox kill test starts and kills.
        .executableTarget(name: "OutboxProcess", dependencies: ["Strata"], path: "Tests/OutboxProcess"),
        // Runs a program and reports its own peak memory (the replay-memory tests).
        .executableTarget(name: "PeakMemory", path: "Tests/PeakMemory"),
        // Drives the built `strata` executable as a process; checks the repository's docs.
        .testTarget(name: "StrataCLITests", dependencies: ["StrataCLI", "StrataFileIO", "StrataWAL", "StrataTesting", "PeakMemory"]),
    ],
    swiftLanguageModes: [.v6]
)
