// swift-tools-version: 6.1
//
// Strata: an embedded, transactional key/value store for Swift with nested contexts.
// Layers point downward only (see README.md): strata (CLI) → Contexts → Engine → WAL → FileIO / Codec → C shims.
import PackageDescription

let package = Package(
    name: "Strata",
    products: [
        // What applications import: the store, contexts and units of work.
        .library(name: "Strata", targets: ["Contexts"]),
        // The crash harness for Strata and for applications' own units of work.
        .library(name: "StrataTesting", targets: ["StrataTesting"]),
        .library(name: "Engine", targets: ["Engine"]),
        .library(name: "WAL", targets: ["WAL"]),
        .library(name: "FileIO", targets: ["FileIO"]),
        .library(name: "Codec", targets: ["Codec"]),
        .library(name: "Locks", targets: ["Locks"]),
        .executable(name: "strata", targets: ["StrataCLI"]),
    ],
    dependencies: [
        // The ecosystem's standard for command-line parsing; used by the `strata` tool only.
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // liblz4 from the system (Debian/Ubuntu: liblz4-dev).
        .systemLibrary(
            name: "CLZ4",
            path: "Sources/CLZ4",
            pkgConfig: "liblz4",
            providers: [.apt(["liblz4-dev"])]
        ),
        // Hardware CRC32C with a software fallback, and the syscalls Glibc hides (fallocate).
        .target(name: "CPlatform"),
        // Checksums, LZ4 blocks and bounded little-endian coding shared by every on-disk format.
        .target(name: "Codec", dependencies: ["CLZ4", "CPlatform"]),
        // Locks that park waiters instead of spinning (pthread mutex and condition variable).
        .target(name: "Locks"),
        // The file-system seam: POSIX implementation and a deterministic simulated one.
        .target(name: "FileIO", dependencies: ["CPlatform", "Locks"]),
        // The LZ4-compressed, checksummed write-ahead log with group commit.
        .target(name: "WAL", dependencies: ["Codec", "FileIO", "Locks"]),
        // The storage engine: page file, copy-on-write B+tree, memtables, snapshots, checkpoints.
        .target(name: "Engine", dependencies: ["WAL", "Codec", "FileIO", "Locks"]),
        // Nested contexts, units of work and the store façade: the public API.
        .target(name: "Contexts", dependencies: ["Engine", "WAL", "FileIO", "Locks", "Codec"]),
        // The crash harness: workloads, suites under the whole fault model, process kills.
        .target(name: "StrataTesting", dependencies: ["Contexts", "FileIO", "Locks"]),
        .executableTarget(
            name: "StrataCLI",
            dependencies: [
                "Contexts", "StrataTesting", "WAL", "FileIO",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "CodecTests", dependencies: ["Codec", "FileIO"]),
        .testTarget(name: "FileIOTests", dependencies: ["FileIO"]),
        .testTarget(name: "WALTests", dependencies: ["WAL", "FileIO", "Codec", "Locks"]),
        .testTarget(name: "EngineTests", dependencies: ["Engine", "WAL", "FileIO", "Codec", "Locks"]),
        .testTarget(name: "ContextsTests", dependencies: ["Contexts", "Engine", "WAL", "FileIO", "Locks"]),
        .testTarget(name: "StrataTestingTests", dependencies: ["StrataTesting"]),
        .testTarget(name: "RecordsTests", dependencies: ["Contexts", "FileIO"]),
        // Drives the built `strata` executable as a process.
        .testTarget(name: "StrataCLITests", dependencies: ["StrataCLI"]),
    ],
    swiftLanguageModes: [.v6]
)
