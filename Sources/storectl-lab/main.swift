import StoreLab
