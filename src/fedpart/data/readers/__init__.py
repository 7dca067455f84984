"""Dataset readers: each dataset's standard on-disk format, read into in-memory tensors.

Images are kept as ``uint8`` ``[N, C, H, W]`` until a batch is prepared
(:func:`fedpart.data.transforms.prepare_batch`), so even Tiny-ImageNet fits in memory.
A missing file is downloaded (checksum verified) when allowed; otherwise, and when the download
fails, a :class:`~fedpart.errors.DataError` names the files to place and the directory. A
truncated or corrupted file is detected (header/size checks, MD5 of known files) and named.

One module per format: :mod:`~fedpart.data.readers.idx` (MNIST, Fashion-MNIST, EMNIST),
:mod:`~fedpart.data.readers.cifar` (CIFAR-10/100 binary), :mod:`~fedpart.data.readers.svhn`
(``.mat``), :mod:`~fedpart.data.readers.image_folders` (CINIC-10, Tiny-ImageNet),
:mod:`~fedpart.data.readers.medmnist` (``.npz``) and :mod:`~fedpart.data.readers.generated`
(scikit-learn's digits, the synthetic teacher); what they share is
:mod:`~fedpart.data.readers.files` (finding a dataset's files, downloading the missing ones) and
:mod:`~fedpart.data.readers.bundle` (labels checked, arrays made a bundle).
:mod:`fedpart.data.sources` registers them.
"""
