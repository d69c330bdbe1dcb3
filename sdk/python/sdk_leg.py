#!/usr/bin/env python3
"""The sdk-python leg from the checkout, without installing tandem_leg (python3 sdk/python/sdk_leg.py
--run RUN_DIR --leg NAME --device cpu [--threads N] [--resume]); see tandem_leg/sdk_leg.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tandem_leg.sdk_leg import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
