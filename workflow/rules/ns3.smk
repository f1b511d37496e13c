# Network simulator vs packet-level ns-3 (paper §5.4.2, Fig 11; docs/validation-network.md).
# Needs Debian's ns-3 3.37 (`sudo apt-get install ns3 libns3-dev libgsl-dev`, or scripts/system/ns3.sh as root);
# the compiler and ns-3 come from the system, not from the conda environment.


rule ns3_replay:
    """Compile validation/ns3/replay.cc against the system ns-3 (installs it first when run as root)."""
    input:
        src="validation/ns3/replay.cc",
        header="validation/ns3/json.h",
        setup="scripts/system/ns3.sh",
    output:
        "build/ns3/replay",
    params:
        pkgs="ns3-core ns3-network ns3-point-to-point",
    log:
        "results/logs/ns3/build.log",
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../environment.yml"
    shell:
        """
        bash {input.setup} > {log} 2>&1 || true
        if ! pkg-config --exists {params.pkgs} 2>/dev/null; then
            echo "rule ns3_replay: ns-3 is missing. Install Debian's ns-3 3.37 with" >&2
            echo "    sudo apt-get install -y ns3 libns3-dev libgsl-dev pkg-config g++" >&2
            echo "(or run: sudo bash scripts/system/ns3.sh), then rerun snakemake." >&2
            exit 1
        fi
        mkdir -p build/ns3
        g++ -O2 -std=c++17 -o {output} {input.src} $(pkg-config --cflags --libs {params.pkgs}) >> {log} 2>&1
        """


rule network_ns3:
    """Replay every case in ns-3, simulate it with the link-queue model and alpha-beta: CSV + Fig 11 analog."""
    input:
        binary="build/ns3/replay",
        code=script_code("network_ns3"),
    output:
        csv="results/validation/network_ns3.csv",
        png=report("results/figures/network_ns3.png", category="5. Components"),
    log:
        "results/logs/validation/network_ns3.log",
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../../environment.yml"
    script:
        "../scripts/network_ns3.py"
