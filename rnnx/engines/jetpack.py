"""Which TensorRT (and CUDA, cuDNN, Ubuntu, python3) each NVIDIA JetPack release ships, with sources.

:data:`JETPACK` maps a JetPack version string (``"4.6"``, ``"5.1.2"``, ...) to a dict:

``l4t``
    the Jetson Linux (L4T) release that JetPack ships.
``tensorrt``, ``cuda``, ``cudnn``
    the versions of the compute stack installed with that JetPack (TensorRT to the patch level,
    CUDA to the minor level, cuDNN to the patch level).
``ubuntu``, ``python3``
    the Ubuntu release the L4T sample root filesystem is based on, and that Ubuntu's default
    ``python3`` (major.minor).
``cite``
    a list of ``{"url": ..., "says": ...}``: every source read for the row and exactly what it
    states. A cell that no source read states is ``None``.

How it was read. NVIDIA's own pages (the "JetPack SDK x.y" pages on developer.nvidia.com, the
L4T release pages, docs.nvidia.com/jetson) were read through a search index that returns only
the opening paragraphs of a page, so for several releases the component versions were not in
the part that could be read. Where that is so, the versions come from OE4T/meta-tegra, the
Yocto BSP layer whose recipes download NVIDIA's own JetPack .deb packages from
https://repo.download.nvidia.com/jetson (recipe file names carry the package versions), read at
the last commit of a branch that still pinned that L4T release. JetPack-to-L4T pairs that no
NVIDIA page read states come from rbonghi/jetson_stats (jtop, ``NVIDIA_JETPACK``) and
dusty-nv/jetson-containers (``get_jetpack_version``), which agree for the releases listed. The
``python3`` column is not stated by any NVIDIA release note read: it is the Ubuntu release's
default from jetson-containers' ``DEFAULT_PYTHON_VERSIONS`` table (18.04 -> 3.6, 20.04 -> 3.8,
22.04 -> 3.10, 24.04 -> 3.12). Each row's ``cite`` says which of these kinds it rests on.

This module is data only: ``rnnx bundle --jetpack`` reads the TensorRT a JetPack ships from it (rnnx
detects no device's JetPack).
"""

from __future__ import annotations

JETPACK: dict[str, dict] = {
    "4.6": {
        "l4t": "32.6.1",
        "tensorrt": "8.0.1",
        "cuda": "10.2",
        "cudnn": "8.2.1",
        "ubuntu": "18.04",
        "python3": "3.6",
        "cite": [
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/562a29439584d9fbd55fd8e6252135ef1daf0c46/recipes-devtools/gie/"
                    "tensorrt-core_8.0.1-1.bb"
                ),
                "says": (
                    "branch dunfell-l4t-r32.6.1 (classes/l4t_bsp.bbclass: L4T_VERSION 32.6.1) pins tensorrt-core 8.0.1-1 "
                    "(libnvinfer8_8.0.1-1+cuda10.2_arm64.deb from repo.download.nvidia.com/jetson), cudnn_8.2.1.32-1.bb, "
                    "cuda-cudart_10.2.300-1.bb"
                ),
            },
            {
                "url": "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
                "says": "NVIDIA_JETPACK: L4T 32.6.1 -> JetPack 4.6",
            },
            {
                "url": "https://gist.github.com/Tiryoh/2b5dc1f86ab6bc3e6922e97a4c1ac2f2",
                "says": "third-party table: JetPack 4.6 | L4T R32.6.1 | TensorRT 8.0.1 | cuDNN 8.2.1 | CUDA 10.2 (not an NVIDIA page)",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "4.6.1": {
        "l4t": "32.7.1",
        "tensorrt": "8.2.1",
        "cuda": "10.2",
        "cudnn": "8.2.1",
        "ubuntu": "18.04",
        "python3": "3.6",
        "cite": [
            {
                "url": "https://developer.nvidia.com/jetpack-sdk-461",
                "says": (
                    "JetPack 4.6.1 is a minor update to JetPack 4.6 and includes TensorRT 8.2, DLA 1.3.7, VPI 1.2 and L4T 32.7.1 (the page "
                    "opening gives TensorRT only as 8.2)"
                ),
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/0c9d74354779525d347b5b5d3981c1c0e7be509e/recipes-devtools/gie/"
                    "tensorrt-core_8.2.1-1.bb"
                ),
                "says": "last commit pinning L4T_VERSION 32.7.1: tensorrt-core_8.2.1-1.bb, cudnn_8.2.1.32-1.bb, cuda-cudart_10.2.300-1.bb",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "4.6.2": {
        "l4t": "32.7.2",
        "tensorrt": "8.2.1",
        "cuda": "10.2",
        "cudnn": "8.2.1",
        "ubuntu": "18.04",
        "python3": "3.6",
        "cite": [
            {
                "url": "https://developer.nvidia.com/embedded/linux-tegra-r3272",
                "says": (
                    "L4T 32.7.2 is a minor release on top of L4T 32.7.1 with security fixes, rest of the features the same as 32.7.1; sample "
                    "filesystem based on Ubuntu 18.04; L4T 32.7.2 is included as part of JetPack 4.6.2"
                ),
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/d9dbc8deeef3a4bbc086ef6aed34ad2767733bcf/recipes-devtools/gie/"
                    "tensorrt-core_8.2.1-1.bb"
                ),
                "says": "last commit pinning L4T_VERSION 32.7.2: tensorrt-core_8.2.1-1.bb, cudnn_8.2.1.32-1.bb, cuda-cudart_10.2.300-1.bb",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "4.6.3": {
        "l4t": "32.7.3",
        "tensorrt": "8.2.1",
        "cuda": "10.2",
        "cudnn": "8.2.1",
        "ubuntu": "18.04",
        "python3": "3.6",
        "cite": [
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/36615dc9e352d5ff945258f05844d0642ebd9925/recipes-devtools/gie/"
                    "tensorrt-core_8.2.1-1.bb"
                ),
                "says": (
                    "branch kirkstone-l4t-r32.7.x, last commit pinning L4T_VERSION 32.7.3: tensorrt-core_8.2.1-1.bb, cudnn_8.2.1.32-1.bb, "
                    "cuda-cudart_10.2.300-1.bb"
                ),
            },
            {
                "url": "https://github.com/OE4T/meta-tegra/wiki/L4T-R32.7.3-Notes",
                "says": "L4T R32.7.3/JetPack 4.6.3; content identical to L4T R32.7.2/JetPack 4.6.2 with listed updates",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12; get_jetpack_version: 32.7.3 -> 4.6.3"
                ),
            },
        ],
    },
    "4.6.4": {
        "l4t": "32.7.4",
        "tensorrt": "8.2.1",
        "cuda": "10.2",
        "cudnn": "8.2.1",
        "ubuntu": "18.04",
        "python3": "3.6",
        "cite": [
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/9401c5a564d48f1f1f649f06f15702cd36814192/recipes-devtools/gie/"
                    "tensorrt-core_8.2.1-1.bb"
                ),
                "says": (
                    "branch kirkstone-l4t-r32.7.x, last commit pinning L4T_VERSION 32.7.4: tensorrt-core_8.2.1-1.bb, cudnn_8.2.1.32-1.bb, "
                    "cuda-cudart_10.2.300-1.bb"
                ),
            },
            {
                "url": "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
                "says": "NVIDIA_JETPACK: L4T 32.7.4 -> JetPack 4.6.4",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "5.0.2": {
        "l4t": "35.1.0",
        "tensorrt": "8.4.1",
        "cuda": "11.4",
        "cudnn": "8.4.1",
        "ubuntu": "20.04",
        "python3": "3.8",
        "cite": [
            {
                "url": "https://developer.nvidia.com/embedded/jetpack-sdk-502",
                "says": (
                    "JetPack 5.0.2 includes Jetson Linux 35.1 with Linux Kernel 5.10, an Ubuntu 20.04 based root file system, and CUDA 11.4, "
                    "TensorRT 8.4.1, cuDNN 8.4.1"
                ),
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/b2cbda0dbde2048fc95da8cd7b343c7f82bf8648/recipes-devtools/gie/"
                    "tensorrt-core_8.4.1-1.bb"
                ),
                "says": "last commit pinning L4T_VERSION 35.1.0: tensorrt-core_8.4.1-1.bb, cudnn_8.4.1.50-1.bb, cuda-cudart_11.4.243-1.bb",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "5.1": {
        "l4t": "35.2.1",
        "tensorrt": "8.5.2",
        "cuda": "11.4",
        "cudnn": "8.6.0",
        "ubuntu": "20.04",
        "python3": "3.8",
        "cite": [
            {
                "url": "https://developer.nvidia.com/embedded/jetpack-sdk-51",
                "says": (
                    "JetPack 5.1 includes Jetson Linux 35.2.1 BSP, an Ubuntu 20.04 based root file system, and packages CUDA 11.4, TensorRT "
                    "8.5.2, cuDNN 8.6.0 and VPI 2.2"
                ),
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "5.1.1": {
        "l4t": "35.3.1",
        "tensorrt": "8.5.2",
        "cuda": "11.4",
        "cudnn": "8.6.0",
        "ubuntu": "20.04",
        "python3": "3.8",
        "cite": [
            {
                "url": "https://developer.nvidia.com/embedded/jetpack-sdk-511",
                "says": (
                    "JetPack 5.1.1 includes Jetson Linux 35.3.1 BSP, an Ubuntu 20.04 based root file system, and packages CUDA 11.4, TensorRT "
                    "8.5.2, cuDNN 8.6.0 and VPI 2.2"
                ),
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "5.1.2": {
        "l4t": "35.4.1",
        "tensorrt": "8.5.2",
        "cuda": "11.4",
        "cudnn": "8.6.0",
        "ubuntu": "20.04",
        "python3": "3.8",
        "cite": [
            {
                "url": "https://developer.nvidia.com/embedded/jetpack-sdk-512",
                "says": (
                    "JetPack 5.1.2 includes Jetson Linux 35.4.1 BSP, an Ubuntu 20.04 based root file system, and packages the same compute stack "
                    "as JetPack 5.1.1 (versions not restated on the page opening)"
                ),
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/d90c9aea71c8c578547cfcaa448e9c5b46263c02/recipes-devtools/gie/"
                    "tensorrt-core_8.5.2-1.bb"
                ),
                "says": "commit setting L4T_VERSION 35.4.1: tensorrt-core_8.5.2-1.bb, cudnn_8.6.0.166-1.bb, cuda-toolkit_11.4.19-1.bb",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "5.1.3": {
        "l4t": "35.5.0",
        "tensorrt": "8.5.2",
        "cuda": "11.4",
        "cudnn": "8.6.0",
        "ubuntu": "20.04",
        "python3": "3.8",
        "cite": [
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/e856df25639902dc5398c6d7b41775f4e2b4e4ee/recipes-devtools/gie/"
                    "tensorrt-core_8.5.2-1.bb"
                ),
                "says": (
                    "branch scarthgap-l4t-r35.x, last commit pinning L4T_VERSION 35.5.0: tensorrt-core_8.5.2-1.bb, cudnn_8.6.0.166-1.bb, "
                    "cuda-cudart_11.4.298-1.bb"
                ),
            },
            {
                "url": "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
                "says": "NVIDIA_JETPACK: L4T 35.5.0 -> JetPack 5.1.3",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12; get_jetpack_version: 35.5.0 -> 5.1.3"
                ),
            },
        ],
    },
    "5.1.4": {
        "l4t": "35.6.0",
        "tensorrt": "8.5.2",
        "cuda": "11.4",
        "cudnn": "8.6.0",
        "ubuntu": "20.04",
        "python3": "3.8",
        "cite": [
            {
                "url": "https://developer.nvidia.com/embedded/jetpack-sdk-514",
                "says": (
                    "JetPack 5.1.4 includes Jetson Linux 35.6.0 BSP, an Ubuntu 20.04 based root file system, and packages the same compute stack "
                    "as JetPack 5.1.3 (versions not restated on the page opening)"
                ),
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/ba9ea4c221603d8eddc0d63c26b15d949727fcf3/recipes-devtools/gie/"
                    "tensorrt-core_8.5.2-1.bb"
                ),
                "says": (
                    "branch scarthgap-l4t-r35.x, last commit pinning L4T_VERSION 35.6.0: tensorrt-core_8.5.2-1.bb, cudnn_8.6.0.166-1.bb, "
                    "cuda-cudart_11.4.298-1.bb"
                ),
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "5.1.5": {
        "l4t": "35.6.1",
        "tensorrt": "8.5.2",
        "cuda": "11.4",
        "cudnn": "8.6.0",
        "ubuntu": "20.04",
        "python3": "3.8",
        "cite": [
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/579bffb246edc3abd14d17ccaa169e83c47762b9/recipes-devtools/gie/"
                    "tensorrt-core_8.5.2-1.bb"
                ),
                "says": (
                    "branch scarthgap-l4t-r35.x, last commit pinning L4T_VERSION 35.6.1: tensorrt-core_8.5.2-1.bb, cudnn_8.6.0.166-1.bb, "
                    "cuda-cudart_11.4.298-1.bb (35.6.2 pins the same three)"
                ),
            },
            {
                "url": "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
                "says": "NVIDIA_JETPACK: L4T 35.6.1, 35.6.2 and 35.6.3 -> JetPack 5.1.5 (jetson-containers: 35.6.1 and 35.6.2)",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "6.0": {
        "l4t": "36.3.0",
        "tensorrt": "8.6.2",
        "cuda": "12.2",
        "cudnn": "8.9.4",
        "ubuntu": "22.04",
        "python3": "3.10",
        "cite": [
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/54795112feccd4411684ab2795cb98b5bc724d67/recipes-devtools/gie/"
                    "tensorrt-core_8.6.2.3-1.bb"
                ),
                "says": (
                    "branch scarthgap, last commit pinning L4T_VERSION 36.3.0: tensorrt-core_8.6.2.3-1.bb, cudnn_8.9.4.25-1.bb, "
                    "cuda-cudart_12.2.140-1.bb"
                ),
            },
            {
                "url": "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
                "says": "NVIDIA_JETPACK: L4T 36.3.0 -> JetPack 6.0 (36.2.0 -> 6.0 DP)",
            },
            {
                "url": "https://docs.nvidia.com/jetson/jetpack/6.0DP/introduction/index.html",
                "says": (
                    "JetPack 6.0 Developer Preview includes Jetson Linux 36.2 with Linux Kernel 5.15 and an Ubuntu 22.04 based root file system "
                    "(the developer preview, not 6.0 GA)"
                ),
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "6.1": {
        "l4t": "36.4.0",
        "tensorrt": "10.3.0",
        "cuda": "12.6",
        "cudnn": "9.3.0",
        "ubuntu": "22.04",
        "python3": "3.10",
        "cite": [
            {
                "url": "https://pytorch.org/TensorRT/getting_started/jetpack.html",
                "says": "Torch-TensorRT docs: JetPack 6.1 incorporates CUDA 12.6, TensorRT 10.3, cuDNN 9.3, DLFW 24.09",
            },
            {
                "url": "https://docs.nvidia.com/metropolis/deepstream/7.1/text/DS_Installation.html",
                "says": "DeepStream 7.1: install JetPack 6.1 GA (corresponding to L4T 36.4 release)",
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/cf93e412b21d5afc28e41536e66de9c1f89702eb/recipes-devtools/gie/"
                    "tensorrt-core_10.3.0.30-1.bb"
                ),
                "says": (
                    "branch scarthgap, last commit pinning L4T_VERSION 36.4.0: tensorrt-core_10.3.0.30-1.bb, cudnn_9.3.0.75-1.bb, "
                    "cuda-cudart_12.6.68-1.bb"
                ),
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "6.2": {
        "l4t": "36.4.3",
        "tensorrt": "10.3.0",
        "cuda": "12.6",
        "cudnn": "9.3.0",
        "ubuntu": "22.04",
        "python3": "3.10",
        "cite": [
            {
                "url": "https://docs.pytorch.org/TensorRT/getting_started/jetpack.html",
                "says": "Torch-TensorRT docs: JetPack 6.2 features CUDA 12.6, TensorRT 10.3, cuDNN 9.3",
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/e4379e5131b0f0df3949c023a13f648506a3084d/recipes-devtools/gie/"
                    "tensorrt-core_10.3.0.30-1.bb"
                ),
                "says": (
                    "branch scarthgap, last commit pinning L4T_VERSION 36.4.3: tensorrt-core_10.3.0.30-1.bb, cudnn_9.3.0.75-1.bb, "
                    "cuda-cudart_12.6.68-1.bb"
                ),
            },
            {
                "url": "https://github.com/rbonghi/jetson_stats/blob/f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611/jtop/core/jetson_variables.py",
                "says": "NVIDIA_JETPACK: L4T 36.4.3 -> JetPack 6.2",
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "6.2.1": {
        "l4t": "36.4.4",
        "tensorrt": "10.3.0",
        "cuda": "12.6",
        "cudnn": "9.3.0",
        "ubuntu": "22.04",
        "python3": "3.10",
        "cite": [
            {
                "url": "https://docs.nvidia.com/jetson/jetpack/introduction",
                "says": (
                    "JetPack 6.2.1 includes NVIDIA Jetson Linux 36.4.4 with Linux Kernel 5.15 and an Ubuntu 22.04-based root file system "
                    "(component versions not in the page opening)"
                ),
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/b4ceb7a7982f0d97fc3211d18b49e1c280ad7db1/recipes-devtools/gie/"
                    "tensorrt-core_10.3.0.30-1.bb"
                ),
                "says": (
                    "branch scarthgap, last commit pinning L4T_VERSION 36.4.4: tensorrt-core_10.3.0.30-1.bb, cudnn_9.3.0.75-1.bb, "
                    "cuda-cudart_12.6.68-1.bb"
                ),
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
    "7.0": {
        "l4t": "38.2.1",
        "tensorrt": "10.13.3",
        "cuda": "13.0",
        "cudnn": "9.12.0",
        "ubuntu": "24.04",
        "python3": "3.12",
        "cite": [
            {
                "url": "https://developer.nvidia.com/embedded/jetpack/downloads/archive-7.0.md",
                "says": "JetPack 7.0 with Jetson Linux 38.2/38.2.1; 38.2.1 is the latest 38.2 release (components not in the opening)",
            },
            {
                "url": "https://docs.nvidia.com/jetson/archives/r38.2.1/DeveloperGuide/AR/JetsonSoftwareArchitecture.html",
                "says": "Jetson Linux (r38.2.1) is derived from Ubuntu 24.04 LTS, Linux kernel 6.8, for Jetson Thor",
            },
            {
                "url": (
                    "https://github.com/OE4T/meta-tegra/blob/9f28a2df0b800dcd8dcb7c33cdadec28349db862/recipes-devtools/gie/"
                    "tensorrt-core_10.13.3.9-1.bb"
                ),
                "says": (
                    "branch master-l4t-r38.2.x, last commit pinning L4T_VERSION 38.2.1: tensorrt-core_10.13.3.9-1.bb, cudnn_9.12.0.46-1.bb, "
                    "cuda-cudart_13.0.48-1.bb; at L4T 38.2.0 (commit 139fed4c) tensorrt-core was 10.13.2.6"
                ),
            },
            {
                "url": (
                    "https://github.com/dusty-nv/jetson-containers/blob/dd206bfe71f9ed35a02d9b9d9954bddb1b649602/jetson_containers/"
                    "l4t_version.py"
                ),
                "says": (
                    "get_lsb_release: L4T major 32 -> 18.04, 34/35 -> 20.04, 36 -> 22.04, 38 -> 24.04; DEFAULT_PYTHON_VERSIONS: 18.04 -> 3.6, "
                    "20.04 -> 3.8, 22.04 -> 3.10, 24.04 -> 3.12"
                ),
            },
        ],
    },
}
