// swift-tools-version: 6.2
// Bookshelf: the use cases of Strata's design as a small application. Application
// services each run one unit of work; a cancellable edit lives in a child context;
// repositories are made per unit of work; the tests run on the in-memory store.
//   swift test --package-path Examples/Bookshelf
import PackageDescription

let package = Package(
    name: "Bookshelf",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Strata", path: "../..")],
    targets: [
        .target(name: "Bookshelf", dependencies: [.product(name: "Strata", package: "Strata")]),
        .testTarget(name: "BookshelfTests", dependencies: ["Bookshelf"]),
    ],
    swiftLanguageModes: [.v6]
)
