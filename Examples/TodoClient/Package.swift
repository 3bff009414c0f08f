// swift-tools-version: 6.2
// TodoClient: an application outside Strata's own package that imports only `Strata`, built
// with every warning an error in Swift 6 mode. It runs units of work from a `@MainActor`
// model and from an actor (each touching its own state in the body), catches a use case's
// own error as its own type with nothing committed, keeps a main-actor list current with
// `store.observe`, publishes domain events from the typed change feed (and resumes them
// where they stopped), and checks that `dump(store)` is short.
// It exits non-zero when any check fails; CI runs it.
//   swift run --package-path Examples/TodoClient
import PackageDescription

let package = Package(
    name: "TodoClient",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Strata", path: "../..")],
    targets: [
        .executableTarget(
            name: "TodoClient",
            dependencies: [.product(name: "Strata", package: "Strata")],
            swiftSettings: [.treatAllWarnings(as: .error)]
        ),
    ],
    swiftLanguageModes: [.v6]
)
